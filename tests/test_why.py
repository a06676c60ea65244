"""Why one variant is slower: ``diag race --profile`` attributes each case's decode time to op groups
and sets it against the baseline's; every timed run says how long its loop spends between the
compiled calls. Real races and runs of case files whose extra work is known; the op names of CUDA
profiles, which this machine cannot produce, are recorded strings."""

from __future__ import annotations

import json
from pathlib import Path

import browser
import pytest
from conftest import diag, diag_here, show

from diag import store
from diag.run import profile
from diag.verdicts import why

CASES = Path(__file__).resolve().parent / "cases"
FLASH_MASK = "Flash Attention does not support non-null attn_mask."
SPIN_MS = 3.0


@pytest.mark.slow
def test_race_profile_names_the_added_op_the_added_python_and_the_attention_kernels(tmp_path):
    """append_last against three variants of it: one more matmul per decode step (1 ms or so), a
    spin of 3 ms of Python between steps, and SDPA held to its math kernel. The matmul's group is the
    top difference and aten::mm its top op; the spin moves the between-step time by at least its own
    length and is Python outside any op; the math variant ran another kernel than append_last."""
    db = tmp_path / "why.db"
    args = ["race", "--case", "append_last", "--case", str(CASES / "extra_matmul.py")]
    args += ["--case", str(CASES / "busy_between.py"), "--case", str(CASES / "math_attention.py")]
    args += ["--backend", "eager", "--fullgraph", "--new-tokens", "8", "--timing-seconds", "0.3", "--profile"]
    env = {"DIAG_TEST_EXTRA_MM": "256", "DIAG_TEST_BETWEEN_MS": str(SPIN_MS), "DIAG_TEST_REFUSALS": "1"}
    found = json.loads(diag(*args, "--db", str(db), "--json", cwd=tmp_path, env_extra=env).stdout)
    (raced,) = found["races"]
    profile = raced["profile"]
    matmul, spin, math = (profile[name] for name in ("extra_matmul", "busy_between", "math_attention"))

    top = matmul["groups"][0]
    assert top["name"] == "matmuls" and top["explains"] and top["low"] > 0, matmul["groups"]
    assert matmul["ops"][0]["name"] == "aten::mm"
    assert matmul["rounds"] == 10 and matmul["measured_ms"] is not None

    between = raced["between_ms"]
    assert between["busy_between"] - between["append_last"] >= 0.8 * SPIN_MS, between
    assert spin["groups"][0]["name"] == "Python outside any op" and spin["groups"][0]["explains"]

    assert math["kernels"] == {"append_last": {"CPU flash": 2.0}, "math_attention": {"math": 2.0}}
    # the stand-in flash check (tests/cases/math_attention.py) refuses every call: append_last masks the cache
    refused = math["refused"]["math_attention"]["flash"]
    assert list(refused) == [FLASH_MASK] and refused[FLASH_MASK] >= 2 * 8, refused
    # a math SDPA's own matmuls and softmax are attention's, not the matmuls' group
    assert not any(row["name"] == "matmuls" and row["explains"] and row["diff_ms"] > 0.05 for row in math["groups"])

    rows = {r["case"]: r for r in store.races(store.open_db(db))}
    assert json.loads(rows["extra_matmul"]["profile"])["groups"][0]["name"] == "matmuls"
    assert rows["busy_between"]["between_ms_case"] == pytest.approx(between["busy_between"])

    text = diag(*args, "--db", str(tmp_path / "text.db"), cwd=tmp_path, env_extra=env).stdout
    assert "where the time goes (extra_matmul - append_last, ms per token, CPU time, 10 profiled rounds):" in text
    assert "attention kernels of math_attention: math x2 a token" in text
    assert "the two ran different attention kernels" in text
    assert f"        flash refused ({refused[FLASH_MASK]} calls): {FLASH_MASK}" in text
    assert "between steps, outside the compiled calls:" in text
    assert "; unexplained +" in text or "; the rows exceed it by " in text

    if browser.CHROMIUM is None:
        pytest.skip("Debian's chromium package is not installed: the variants page is not looked at")
    out = tmp_path / "site"
    assert diag_here("report", "--db", str(db), "--out", str(out), cwd=tmp_path).returncode == 0
    script = """
      return Array.from(d.querySelectorAll("h3")).filter(function (h) { return h.textContent.indexOf("Where") === 0; })
        .map(function (h) {
          var chart = h.nextElementSibling, table = chart.nextElementSibling.querySelector("table.why");
          var box = chart.querySelector("svg").getBoundingClientRect();
          return [h.textContent, chart.querySelectorAll("svg.stacked rect").length, box.width > 300,
                  table.rows[1].cells[0].textContent];
        });
    """
    shown = {
        heading.split("'")[0]: rest
        for heading, *rest in browser.measure(out / "variants.html", 1400, 900, script, tmp_path)
    }
    assert set(shown) == {"Where extra_matmul", "Where busy_between", "Where math_attention"}
    rects, wide, top = shown["Where extra_matmul"]
    assert rects >= 10 and wide and top == "matmuls"
    assert shown["Where busy_between"][2] == "Python outside any op"
    page = (out / "variants.html").read_text("utf-8")
    assert f"Refused for math_attention: flash refused ({refused[FLASH_MASK]} calls): {FLASH_MASK}" in page


@pytest.mark.slow
def test_a_timed_run_says_how_long_its_loop_spends_between_compiled_calls(tmp_path):
    db = tmp_path / "b.db"
    common = ["--backend", "eager", "--fullgraph", "--new-tokens", "6", "--timing-seconds", "0.2", "--db", str(db)]
    env = {"DIAG_TEST_BETWEEN_MS": str(SPIN_MS)}
    ids = [
        json.loads(diag("run", "--case", case, *common, "--json", cwd=tmp_path, env_extra=env).stdout)[0]["id"]
        for case in ("append_last", str(CASES / "busy_between.py"))
    ]
    plain, spun = (show(db, run_id, tmp_path) for run_id in ids)
    assert plain["compiled_between_ms"] is not None and plain["compiled_between_ms"] < SPIN_MS / 2
    assert spun["compiled_between_ms"] - plain["compiled_between_ms"] >= 0.8 * SPIN_MS
    said = diag("show", str(ids[1]), "--db", str(db), cwd=tmp_path).stdout
    assert "between steps (compiled, outside the compiled calls):" in said


@pytest.mark.parametrize(
    "op, group, kernel",
    [
        # op and kernel names as torch's CUDA profiles give them (recorded; no GPU here)
        ("aten::_scaled_dot_product_flash_attention", "attention", "flash"),
        ("aten::_flash_attention_forward", "attention", "flash"),
        ("aten::_scaled_dot_product_efficient_attention", "attention", "memory-efficient"),
        ("aten::_efficient_attention_forward", "attention", "memory-efficient"),
        ("aten::_scaled_dot_product_cudnn_attention", "attention", "cuDNN"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention", "CPU flash"),
        ("aten::_scaled_dot_product_attention_math", "attention", "math"),
        ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel)", "attention", None),
        ("ampere_sgemm_128x64_tn", "matmuls", None),
        ("aten::addmm", "matmuls", None),
        ("triton_poi_fused_add_mul_0", "compiled kernels", None),
        ("## Call CompiledFxGraph fi6ieyav5mxeobo5cx3z4b6yrccvyjmkazl2oewsjvmevfw74whr ##", "compiled kernels", None),
        ("Torch-Compiled Region: 0/1", "compiled-region overhead", None),
        ("aten::index_copy_", "cache moves and copies", None),
        ("Memcpy DtoD (Device -> Device)", "cache moves and copies", None),
        ("aten::view", "views and allocation", None),
        ("aten::rsqrt", profile.OTHER, None),
        (profile.OUTSIDE, "Python outside any op", None),
    ],
)
def test_op_names_fall_in_their_groups_and_name_their_attention_kernel(op, group, kernel):
    assert profile.group_of(op) == group
    assert profile.kernel_of(op) == kernel


def _round(**cpu_ms):
    return {"steps": 4, "cpu_us": [{k: v * 1e3 for k, v in cpu_ms.items()}] * 4, "sdpa_calls": {}}


def test_rows_whose_interval_holds_zero_explain_nothing_and_the_rest_is_said():
    """Ten rounds a side: the variant's matmuls are 0.5 ms a token more in every round; its Python
    outside any op is up in half of them and down in the other half."""
    base = [_round(**{"aten::mm": 1.0, profile.OUTSIDE: 0.2}) for _ in range(10)]
    case = [_round(**{"aten::mm": 1.5, profile.OUTSIDE: 0.2 + (0.1 if i % 2 else -0.1)}) for i in range(10)]
    found = why.explain({"rounds": {"a": base, "b": case}}, "a", "b", measured_ms=0.6)
    top, rest = found.groups[0], {row.name: row for row in found.groups[1:]}
    assert (top.name, top.explains) == ("matmuls", True) and top.diff_ms == pytest.approx(0.5)
    assert not rest["Python outside any op"].explains
    assert found.explained_ms == pytest.approx(0.5) and found.explained_share == pytest.approx(0.5 / 0.6)
    said = "\n".join(why.lines(found))
    assert "explain +0.500 (83%); unexplained +0.100" in said and "(interval holds 0)" in said


def test_a_race_whose_profiler_failed_says_so():
    found = why.explain({"rounds": {"a": [], "b": []}, "error": "RuntimeError: no profiler"}, "a", "b", 0.1)
    assert found.groups == [] and "RuntimeError: no profiler" in "\n".join(why.lines(found))


@pytest.mark.slow
def test_profiled_runs_show_their_groups_compare_op_by_op_and_a_kernel_change_fails_check(tmp_path):
    """One row run twice with --profile: SDPA on its default kernel, then held to math. show names
    the groups and kernels; compare --profile ranks the groups; check calls the kernel change a
    regression."""
    db = tmp_path / "k.db"
    args = ["run", "--case", str(CASES / "math_attention.py"), "--backend", "eager", "--fullgraph"]
    args += ["--new-tokens", "6", "--repeats", "2", "--timing-seconds", "0.1", "--profile", "--db", str(db), "--json"]
    ids = [
        json.loads(diag(*args, cwd=tmp_path, env_extra={"DIAG_TEST_SDPA": kind, "DIAG_TEST_REFUSALS": refuse}).stdout)[
            0
        ]["id"]
        for kind, refuse in (("default", "1"), ("math", "0"))
    ]
    said = diag("show", str(ids[0]), "--db", str(db), cwd=tmp_path).stdout
    assert "compiled step by op group (CPU ms per token, median of 5 profiled generations):" in said
    assert "attention kernels: CPU flash x2 a token" in said
    # the stand-in flash check (tests/cases/math_attention.py): one eager generation, 2 layers, 6 tokens
    assert f"    flash refused (12 calls): {FLASH_MASK}" in said
    assert "refused" not in diag("show", str(ids[1]), "--db", str(db), cwd=tmp_path).stdout

    compared = diag("compare", str(ids[0]), str(ids[1]), "--profile", "--db", str(db), cwd=tmp_path).stdout
    assert "attention kernels: CPU flash x2 a token -> math x2 a token" in compared
    assert (
        f"where the time goes (run #{ids[1]} - run #{ids[0]}, ms per token, CPU time, 5 profiled generations a side):"
        in compared
    )
    found = json.loads(
        diag("compare", str(ids[0]), str(ids[1]), "--profile", "--db", str(db), "--json", cwd=tmp_path).stdout
    )
    (row,) = found["rows"]
    assert {g["name"] for g in row["profile"]["groups"]} >= {"attention", "Python outside any op"}

    checked = diag("check", "--db", str(db), cwd=tmp_path, check=False)
    assert (
        checked.returncode == 1
        and "attention kernels changed: CPU flash x2 a token -> math x2 a token" in checked.stdout
    )


def test_a_profile_without_decode_steps_says_so():
    """--new-tokens 1: every profiled generation is a prefill alone, so no step range was recorded."""
    empty = {"steps": 0, "cpu_us": [], "sdpa_calls": {}}
    found = why.explain({"rounds": {"a": [empty] * 10, "b": [empty] * 10}}, "a", "b", 0.0)
    assert found.groups == [] and "no decode step was profiled" in "\n".join(why.lines(found))


# what torch's CUDA kernel checks warn, as the strings torch 2.14.1's libtorch_cuda.so carries them
# (a CPU build answers those checks with a bare False, and no GPU is here to make them speak), with
# the suffix torch adds to a C++ warning
TRIGGERED = " (Triggered internally at /pytorch/aten/src/ATen/native/transformers/cuda/sdp_utils.cpp:{}.)"


@pytest.mark.parametrize(
    "messages, said",
    [
        (
            ["Flash Attention does not support non-null attn_mask." + TRIGGERED.format(1)],
            "Flash Attention does not support non-null attn_mask.",
        ),
        # select_sdp_backend's header, then the reason, as a log shows them before "No available kernel"
        (
            [
                "Flash attention kernel not used because:" + TRIGGERED.format(2),
                "Flash attention does not support the is_causal flag when seqlen_q != seqlen_k. Got seqlen_q: 1 "
                "seqlen_k: 9. If you would like to use causal attention with non-square masks, please see "
                "CausalAttnMask." + TRIGGERED.format(3),
            ],
            "Flash attention does not support the is_causal flag when seqlen_q != seqlen_k. Got seqlen_q: 1 "
            "seqlen_k: 9. If you would like to use causal attention with non-square masks, please see CausalAttnMask.",
        ),
        (
            [
                "Memory efficient kernel not used because:",
                "Mem efficient attention requires last dimension of inputs "
                "to be divisible by 8. Got Query.size(-1): 100, Key.size(-1): 100, Value.size(-1): 100 instead.",
            ],
            "Mem efficient attention requires last dimension of inputs to be divisible by 8. Got Query.size(-1): 100, "
            "Key.size(-1): 100, Value.size(-1): 100 instead.",
        ),
        (["cuDNN attention kernel not used because:"], None),
        ([], None),
    ],
)
def test_torch_s_kernel_refusals_read_as_their_reason(messages, said):
    from diag.probe import attribution

    assert attribution.reason(messages) == said


def test_each_sdpa_call_of_a_generation_is_asked_why_a_kernel_was_refused(monkeypatch):
    """A generation's SDPA calls, positional and by keyword, reach the checks as torch's own
    SDPAParams; a refusal is counted per reason, an accepted kernel not at all. The checks stand in
    for torch's CUDA ones, which a CPU build answers with a bare False."""
    import types
    import warnings

    import torch

    from diag.probe import attribution

    def flash(params, debug):
        assert isinstance(params, torch.backends.cuda.SDPAParams) and debug
        if params.attn_mask is not None:
            warnings.warn("Flash Attention does not support non-null attn_mask." + TRIGGERED.format(1), stacklevel=2)
            return False
        if params.dropout > 0:
            warnings.warn("Flash attention kernel not used because:", stacklevel=2)
            warnings.warn("dropout" + TRIGGERED.format(4), stacklevel=2)
            return False
        return True

    def cudnn(params, debug):
        return params.is_causal  # refused without a word

    monkeypatch.setattr(attribution, "refusal_checks", lambda workload: [("flash", flash), ("cuDNN", cudnn)])
    q = torch.randn(1, 2, 3, 8)
    mask = torch.zeros(1, 1, 3, 3)
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def generate():
        sdpa(q, q, q, mask)
        sdpa(q, q, q, attn_mask=mask)
        sdpa(q, q, q, is_causal=True)
        sdpa(query=q, key=q, value=q, dropout_p=0.5)

    found = attribution.refusals(types.SimpleNamespace(torch=torch), generate)
    assert found == {
        "flash": {"Flash Attention does not support non-null attn_mask.": 2, "dropout": 1},
        "cuDNN": {attribution.NO_REASON: 3},
    }
    lines = why.refusal_lines(found)
    assert lines[0] == "cuDNN refused (3 calls): " + attribution.NO_REASON
    assert lines[1] == "flash refused (2 calls): Flash Attention does not support non-null attn_mask."


def test_off_cuda_no_check_is_asked_and_the_generation_runs_as_it_would():
    import types

    import torch

    from diag.probe import attribution

    workload = types.SimpleNamespace(torch=torch, on_cuda=False)
    ran = []
    assert attribution.refusal_checks(workload) == []
    assert attribution.refusals(workload, lambda: ran.append(1)) == {} and ran == []


def test_a_call_the_checks_cannot_take_is_left_unasked_and_still_runs(monkeypatch):
    import types

    import torch

    from diag.probe import attribution

    def broken(params, debug):
        raise RuntimeError("checks cannot take this call")

    monkeypatch.setattr(attribution, "refusal_checks", lambda workload: [("flash", broken)])
    q = torch.randn(1, 2, 3, 8)
    out = []
    found = attribution.refusals(
        types.SimpleNamespace(torch=torch),
        lambda: out.append(torch.nn.functional.scaled_dot_product_attention(q, q, q)),
    )
    assert found == {} and out[0].shape == q.shape


def test_a_row_s_share_is_of_the_measured_difference_the_text_defines():
    """One denominator: each row's share and the explained share are of the difference the race
    measured, and the line that gives it says what it is made of."""
    rng = __import__("random").Random(3)
    base = [{"matmuls": 0.5, "attention": 0.4, "elementwise and other ops": 0.2} for _ in range(10)]
    case = [
        {"matmuls": 1.5 + rng.gauss(0, 0.01), "attention": 0.9 + rng.gauss(0, 0.01), "elementwise and other ops": 0.2}
        for _ in range(10)
    ]
    measured = 2.0  # the race: 0.5 ms more than the rows add up to (what the profiler cannot see)
    found = why.Breakdown("append_last", "mine", 10, False, measured_ms=measured, measured_how="its figures")
    found.groups = why._rows(case, base, measured=measured)
    found.explained_ms = sum(row.diff_ms for row in found.groups if row.explains)
    shares = {row.name: row.share for row in found.groups}
    assert shares["matmuls"] == pytest.approx(0.5, abs=0.02) and shares["attention"] == pytest.approx(0.25, abs=0.02)
    explaining = sum(row.share for row in found.groups if row.explains)
    assert found.explained_share == pytest.approx(explaining)
    said = "\n".join(why.lines(found))
    assert "measured +2.000 ms per token (its figures), of which each row's share above is" in said
    assert f"({found.explained_share:.0%})" in said and "  50%" in said


def test_the_raw_events_attribute_a_generation_as_torch_s_own_event_list_does():
    """A compiled decode loop (aot_eager) with attention, a recording range and a Python between
    steps, profiled once: the attribution nested from the profiler's raw events (what ``race
    --profile`` reads off CUDA) equals the one from torch's FunctionEvents, step by step and op by op."""
    import torch

    from diag.probe import attribution
    from diag.probe.cases import EMIT_RANGE

    layers = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(4)])

    def step(x):
        q = layers(x).view(1, 4, 2, 16).transpose(1, 2)
        return torch.nn.functional.scaled_dot_product_attention(q, q, q).transpose(1, 2).reshape(1, 4, 32) + x.sum()

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    x = torch.randn(1, 4, 32)
    compiled(x)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            with torch.profiler.record_function(attribution.STEP):
                out = compiled(x)
                with torch.profiler.record_function(EMIT_RANGE):
                    out.argmax()
                sum(range(2000))  # Python outside any op
    raw = attribution.attribute(attribution.nested(torch, prof.profiler.kineto_results.events()))
    listed = attribution.attribute(prof.events())
    assert raw["steps"] == listed["steps"] == 5
    assert raw["sdpa_calls"] == listed["sdpa_calls"] and raw["sdpa_calls"]
    for ours, torchs in zip(raw["cpu_us"], listed["cpu_us"]):
        assert ours.keys() == torchs.keys()
        assert all(abs(ours[name] - torchs[name]) <= 0.02 for name in ours), (ours, torchs)
