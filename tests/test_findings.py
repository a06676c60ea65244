"""The expected findings on the installed torch, each from a real compile in a real probe process."""

from __future__ import annotations

import linecache
from pathlib import Path

import pytest
from conftest import REPO, diag, show

from diag.probe import compat


def test_append_last_fullgraph_passes_with_no_breaks_or_decode_recompiles(findings):
    run = findings[("append_last", True)]
    assert run["status"] == "pass"
    assert run["graph_break_count"] == 0
    assert run["graph_count"] >= 1
    # The first decode step compiles; any recompile after it would mean the shapes are not fixed.
    assert [r for r in run["recompiles"] if (r["decode_step"] or 0) > 0] == []
    assert run["tokens_equal"] == 1
    assert run["oracle_equal"] == 1


def test_the_debug_log_keeps_dynamos_debug_records_but_none_per_traced_instruction(findings):
    """dynamo's per-instruction artifacts come on with its DEBUG log and were most of a large model's
    log (320 MB, most of the pass's CPU); no parser reads them, so the capture keeps them off."""
    for (case, _), run in findings.items():
        log = (Path(run["artifacts_dir"]) / "torch_debug.log").read_text()
        assert " DEBUG torch._dynamo." in log, case
        for name in compat.PER_INSTRUCTION_TRACES:
            assert f".__{name} " not in log, (case, name)


def test_the_debug_log_has_no_side_effect_stacks(findings):
    """dynamo's side_effects artifact prints the whole Python stack of every variable a traced call
    mutated (a fifth of a transformers model's log, about 8% of the pass's CPU); no parser reads it."""
    import torch._logging._internal as internal

    if "side_effects" not in internal.log_registry.artifact_names:
        pytest.skip("this torch has no side_effects artifact")
    run = findings[("hf_dynamic_cache", False)]  # its decode step mutates the cache and kwargs
    log = (Path(run["artifacts_dir"]) / "torch_debug.log").read_text()
    assert " DEBUG torch._dynamo.symbolic_convert" in log
    assert ".__side_effects " not in log


def test_dynamic_slice_fullgraph_fails_at_the_slicing_line(findings):
    run = findings[("dynamic_slice", True)]
    assert run["status"] == "fullgraph_error"
    assert "data-dependent" in run["error_message"]
    file, _, line = run["error_location"].rpartition(":")
    assert file == str(REPO / "diag" / "cases" / "dynamic_slice.py")
    assert ": valid_past_index + 1]" in linecache.getline(file, int(line))


def test_dynamic_slice_without_fullgraph_falls_back_and_records_a_hidden_error(findings):
    run = findings[("dynamic_slice", False)]
    # On torch 2.13 the frame compiles up to the break, then runs its remainder eagerly.
    assert run["status"] in ("eager_fallback", "graph_break")
    assert run["hidden_error_count"] >= 1
    assert any(h["source"] == "frame_fallback" for h in run["hidden_errors"])
    assert run["tokens_equal"] == 1


def test_hf_static_cache_fullgraph_passes(findings):
    run = findings[("hf_static_cache", True)]
    assert run["status"] == "pass"
    assert run["graph_break_count"] == 0
    assert run["tokens_equal"] == 1


@pytest.mark.parametrize("fullgraph", [True, False])
def test_hf_dynamic_cache_recompiles_are_recorded_with_reasons(findings, fullgraph):
    run = findings[("hf_dynamic_cache", fullgraph)]
    assert run["recompile_count"] >= 1
    assert run["recompile_count"] == len(run["recompiles"])
    for recompile in run["recompiles"]:
        assert recompile["reason"]
        assert recompile["key"].startswith("Recompile:")
        assert recompile["decode_step"] is not None and recompile["decode_step"] >= 1


def test_swallowed_backend_error_is_a_hidden_error(findings):
    run = findings[("swallowed_error", True)]
    hidden = [h for h in run["hidden_errors"] if h["exc_type"] == "TypeError"]
    assert hidden, run["hidden_errors"]
    assert "unexpected keyword argument 'guards'" in hidden[0]["message"]
    assert hidden[0]["logger"].startswith("torch._dynamo")
    # The call returned normally, but nothing was compiled for it.
    assert run["status"] == "eager_fallback"
    assert run["tokens_equal"] == 1


def test_every_run_records_environment_and_capabilities(findings):
    for run in findings.values():
        assert run["torch_version"].startswith("2.")
        assert run["build_git_version"]
        assert run["transformers_version"]
        assert run["capabilities"]["debug_logs"]["available"] is True


def test_wrong_compiled_tokens_are_a_mismatch_with_the_differing_step(findings):
    run = findings[("mismatch", True)]
    assert run["status"] == "mismatch"
    assert run["tokens_equal"] == 0
    assert run["first_differing_step"] == 1
    assert run["eager_margin"] > 0.01


@pytest.mark.slow
def test_local_checkpoint_via_model_option(tmp_path):
    """--model loads a transformers checkpoint from disk (saved here, since there is no hub)."""
    import torch

    from diag.probe import llama

    checkpoint = tmp_path / "tiny-llama"
    llama.build_model(None, torch.float32, "cpu", seed=3).save_pretrained(checkpoint)
    db = tmp_path / "m.db"
    diag(
        "run",
        "--case",
        "append_last",
        "--fullgraph",
        "--backend",
        "eager",
        "--no-timing",
        "--new-tokens",
        "4",
        "--model",
        str(checkpoint),
        "--db",
        str(db),
        cwd=tmp_path,
    )
    run = show(db, 1, tmp_path)
    assert run["model"] == str(checkpoint)
    assert run["status"] == "pass"
    assert run["oracle_equal"] == 1


@pytest.mark.slow
def test_a_break_resumed_and_the_same_break_not_resumed_are_two_rows_as_torch_counts_them(tmp_path):
    """One `.item()` line reached where dynamo resumes after it and where it cannot (in a loop):
    torch counts the first under "graph_break" and the second under "unimplemented"; diag had merged
    them into one row marked resumed, and shown the one skipped frame as two hidden errors."""
    db = tmp_path / "b.db"
    case = str(REPO / "tests" / "cases" / "breaks_both_ways.py")
    args = ["--case", case, "--no-fullgraph", "--backend", "eager", "--no-timing", "--new-tokens", "3"]
    diag("run", *args, "--db", str(db), cwd=tmp_path)
    run = show(db, 1, tmp_path)
    counted = {kind: sum(run["counters"].get(kind, {}).values()) for kind in ("graph_break", "unimplemented")}
    rows = run["graph_breaks"]
    assert sum(gb["count"] for gb in rows if gb["resumable"]) == counted["graph_break"] > 0, rows
    assert sum(gb["count"] for gb in rows if not gb["resumable"]) == counted["unimplemented"] > 0, rows
    at_item = [gb for gb in rows if gb["location"] == f"{case}:11"]
    assert sorted(bool(gb["resumable"]) for gb in at_item) == [False, True], at_item
    # the frame torch skipped for it is one hidden error, located at the break, though torch reports
    # it twice (the graph-break log, and convert_frame at the skipped frame's line)
    fell_back = [h for h in run["hidden_errors"] if h["source"] == "frame_fallback"]
    assert [(h["location"], h["count"]) for h in fell_back] == [(f"{case}:11", 1)], fell_back
    shown = diag("show", "1", "--db", str(db), cwd=tmp_path).stdout
    assert f"at {case}:11 (resumed)" in shown and f"at {case}:11 (not resumed: rest of frame eager)" in shown


@pytest.mark.slow
def test_a_break_inside_a_custom_op_is_located_at_the_users_call_on_every_decode_step(tmp_path):
    """torch logs the break again on the next decode step with the user stack suppressed as a
    duplicate, its innermost frame torch's custom_ops.py: the row names the user's call of the op."""
    db = tmp_path / "c.db"
    case = str(REPO / "tests" / "cases" / "custom_op_break.py")
    args = ["--case", case, "--no-fullgraph", "--backend", "eager", "--no-timing", "--new-tokens", "3"]
    diag("run", *args, "--db", str(db), cwd=tmp_path)
    run = show(db, 1, tmp_path)
    call = next(n for n in range(1, 60) if "return scale_rows(logits)" in linecache.getline(case, n))
    assert run["graph_break_count"] >= 2, run["graph_breaks"]
    assert {gb["location"] for gb in run["graph_breaks"]} == {f"{case}:{call}"}, run["graph_breaks"]


@pytest.mark.slow
def test_a_padded_batch_of_two_compiles_whole_once_and_matches_eager(tmp_path):
    """transformers' own compile tests generate for a padded batch of two: the second prompt is
    left-padded (its mask starts with zeros), and the static-cache decode step must compile whole,
    match eager, and not recompile on a second generate call."""
    from diag.probe import llama
    from diag.verdicts import regress

    _, mask = llama.make_prompt(2, 16, 100, seed=0, device="cpu")
    assert mask[0].all() and not mask[1, 0] and mask[1, -1]
    db = tmp_path / "p.db"
    args = ["--case", "hf_static_cache", "--batch-size", "2", "--fullgraph", "--backend", "eager", "--no-timing"]
    diag("run", *args, "--new-tokens", "3", "--db", str(db), cwd=tmp_path)
    run = show(db, 1, tmp_path)
    assert (run["status"], run["batch_size"], run["oracle_equal"], run["tokens_equal"]) == ("pass", 2, 1, 1), run
    assert run["second_call_recompiles"] == 0
    assert run["decode_recompile_steps"] <= regress.Thresholds().decode_recompile_steps


@pytest.mark.slow
def test_two_frames_given_up_at_one_line_in_one_step_are_two_hidden_errors(tmp_path):
    """A helper's break that makes torch skip each of its two callers whole is logged at the helper's
    line once per caller (transformers 5.5's xglm and olmo_hybrid do this through two wrappers): torch
    counts two frames given up, and diag said one."""
    db = tmp_path / "t.db"
    case = REPO / "tests" / "cases" / "two_frames_one_line.py"
    diag("run", "--case", str(case), "--backend", "eager", "--no-fullgraph", "--no-timing", "--new-tokens", "3",
         "--db", str(db), cwd=tmp_path)  # fmt: skip
    run = show(db, 1, tmp_path)
    frames = run["counters"]["frames"]
    assert frames["total"] - frames["ok"] == 2, frames
    assert run["hidden_error_count"] == 2, run["hidden_errors"]
    (row,) = run["hidden_errors"]
    assert row["location"].endswith("two_frames_one_line.py:12") and row["count"] == 2


USER_CODE = '\n\nfrom user code:\n   File "/seed/llama.py", line 204, in forward\n    q = self.qkv_proj(hidden)\n'


class TorchRuntimeError(Exception):
    """As torch 2.0's dynamo raises it: no words of its own, ``raise TorchRuntimeError() from e``, and
    dynamo's user-code section added to its message."""


def test_an_error_with_no_words_of_its_own_is_said_by_its_cause_or_the_assert_that_failed():
    from diag.probe.session import exception_info

    try:
        try:
            raise RuntimeError(
                "Unhandled FakeTensor Device Propagation for aten.mm.default, found two devices cpu, meta"
            )
        except RuntimeError as cause:
            raise TorchRuntimeError(USER_CODE) from cause
    except TorchRuntimeError as exc:
        said = exception_info(exc)["error_message"]
    first, *rest = said.splitlines()
    assert (
        first
        == "RuntimeError: Unhandled FakeTensor Device Propagation for aten.mm.default, found two devices cpu, meta"
    )
    assert "from user code:" in said and "/seed/llama.py" in said

    source = None
    try:
        # as dynamo's `assert self.source`, whose AssertionError says nothing
        assert source
    except AssertionError as exc:
        exc.args = (USER_CODE,)
        line = exc.__traceback__.tb_lineno
        said = exception_info(exc)["error_message"]
    assert said.splitlines()[0] == f"`assert source` failed at {__file__}:{line}"

    assert exception_info(ValueError("bad shape" + USER_CODE))["error_message"] == "bad shape" + USER_CODE
