"""``hf:<model_type>``: any transformers decoder architecture as a case, through transformers' own
generate with a static cache and a compiled forward. Real subprocesses and real tiny models."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO, TEST_CASES, diag, run_section, show


@pytest.mark.slow
def test_hf_all_lists_the_decoder_only_causal_lm_architectures_of_the_installed_transformers():
    done = subprocess.run(
        [sys.executable, "-m", "diag.probe", "architectures"], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    listed = json.loads(done.stdout)
    assert {"llama", "gpt2", "mistral"} <= set(listed)
    assert "bart" not in listed and "t5" not in listed  # encoder-decoder configs are left out
    assert listed == sorted(listed)


def test_a_model_type_that_is_no_name_is_refused_in_one_line(tmp_path):
    done = diag("run", "--case", "hf:../../etc", "--db", str(tmp_path / "x.db"), check=False, cwd=tmp_path)
    assert done.returncode == 1 and "not a transformers model_type" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.db").exists()


@pytest.mark.slow
def test_llama_through_generate_with_a_static_cache_and_the_architecture_page(tmp_path):
    db = tmp_path / "h.db"
    done = diag(
        "run",
        "--case",
        "hf:llama",
        "--backend",
        "eager",
        "--no-timing",
        "--new-tokens",
        "4",
        "--db",
        str(db),
        "--json",
        "--jobs",
        "2",
        cwd=tmp_path,
    )
    runs = {r["fullgraph"]: show(db, r["id"], tmp_path) for r in json.loads(done.stdout)}
    for run in runs.values():
        assert run["status"] in ("pass", "graph_break"), (run["status"], run.get("error_message"))
        assert run["tokens_equal"] == 1 and run["oracle_equal"] == 1  # generate on its own model, recorded
        # generate calls the forward with other keyword arguments in the prefill than in decode:
        # one recompile, attributed to decode step 0
        assert [r["decode_step"] for r in run["recompiles"]] == [0]
        assert run["case_note"] is None  # the static cache worked: nothing to say
    out = tmp_path / "site"
    diag("report", "--db", str(db), "--out", str(out), cwd=tmp_path)
    page = (out / "architectures.html").read_text()
    assert "<strong>llama</strong>" in page and "1 of 1 architectures compile fullgraph" in page
    assert "architectures.html" in (out / "index.html").read_text()


@pytest.mark.parametrize("model_type", ["llama", "gptj", "ctrl", "deepseek_v3", "falcon"])
def test_tiny_configs_keep_what_the_architecture_needs_and_generate_eagerly(model_type):
    """Each of these failed with a naive shrink: gptj's rotary_dim beyond its head size, ctrl's
    forward taking no attention mask, deepseek's MLA needing as many kv heads as heads, falcon's
    read-only head_dim."""
    import torch

    from diag.probe import hf

    config = hf.tiny_config(model_type)
    if getattr(config, "rotary_dim", None):
        assert config.rotary_dim <= (getattr(config, "head_dim", None) or config.n_embd // config.n_head)
    model = hf.tiny_model(model_type, torch.float32, "cpu", 0)
    assert sum(p.numel() for p in model.parameters()) < 5_000_000
    prompt = torch.randint(3, 500, (2, 6))
    out = hf.decode(model, prompt, torch.ones_like(prompt), 3)
    assert out.shape == (2, 9)


SHRINK_RULES = {
    "ministral": "head_dim left unset by the default config",
    "nemotron": "kv heads left unset",
    "deepseek_v2": "experts per token left unset",
    "dots1": "routed and shared experts left unset",
    "rwkv": "attention_hidden_size derived from the default hidden size",
    "mamba2": "state-space heads that tile the expanded hidden size",
    "falcon_h1": "the state-space width named apart (mamba_d_ssm)",
    "jamba": "an attention layer in the tiny depth (its period and offset)",
    "bamba": "an attention layer where the default has none (its indices)",
    "reformer": "an encoder's causal-LM class as a decoder, axial factors of the tiny sizes",
    "xmod": "a default language for its adapters",
    "longcat_flash": "MLA's query-key size as the sum of its parts",
    "axk1": "one expert group for the tiny expert count",
    "inkling2_text": "an unpadded vocabulary within the tiny one",
    "cohere_compass_text": "rotary parameters per layer type",
    "gemma3n_text": "no layers that read another's cache",
    "dots3_note_text": "a per-layer head count left alone, not set where it cannot be read",
    # 2026-12-05, transformers 5.25
    "hrm_text": "layers per stack derived from the tiny depth when the config is made again",
    "xlstm": "a block count derived from the tiny depth, a query-key width its cache does not round",
    "zamba2": "hybrid layer ids derived from the tiny layer pattern",
    "zamba": "two hybrid layers, the second tied to the first",
    "granitemoehybrid": "a full-attention layer beside the default's linear-attention ones",
    "lfm2_moe": "a layer pattern where the default leaves it unset",
    "qwen4_exp_text": "the token indexer's sizes the default leaves unset",
    "dbrx": "the nested attention config's rotary base and query-key-value clip",
}


@pytest.mark.slow
@pytest.mark.parametrize("model_type", sorted(SHRINK_RULES))
def test_each_rule_of_the_shrink_makes_its_architecture_generate(model_type):
    """Each of these failed in eager (or, dots3_note, once the shrink first changed) under the shrink of
    2026-12-03 (transformers 5.24/5.25), for the reason beside it; each generates now, and stays small."""
    import torch

    from diag.probe import hf

    if model_type not in hf.architectures():
        pytest.skip(f"this transformers has no {model_type}")
    model = hf.tiny_model(model_type, torch.float32, "cpu", 0)
    # a probe of a few hundred MB at most (dots3_note's per-layer head counts stay as they are: 20M)
    assert sum(p.numel() for p in model.parameters()) < 25_000_000, SHRINK_RULES[model_type]
    prompt = torch.randint(3, 500, (1, 6))
    assert hf.decode(model, prompt, torch.ones_like(prompt), 3).shape == (1, 9), SHRINK_RULES[model_type]


def test_an_hf_case_builds_its_model_and_prompt_with_the_runs_seed():
    """--seed reaches hf: cases: the run's seed builds the weights and the prompt (they were seed 0's
    whatever the run said), and the same seed builds the same ones again."""
    from diag.probe.cases import load_case_file
    from diag.probe.session import Workload
    from diag.probe.spec import Config, Spec
    from diag.run import catalog

    ref = catalog.hf_case("llama")

    def built(seed: int):
        spec = Spec(ref.name, ref.path, Config(backend="eager", new_tokens=3, prompt_length=6, seed=seed))
        gen = Workload(spec, load_case_file(ref.path)).eager()
        return gen.input_ids.tolist(), float(sum(p.detach().double().sum() for p in gen.model.parameters()))

    first, other, again = built(0), built(7), built(0)
    assert first == again
    assert other[0] != first[0] and other[1] != first[1]


def test_generate_does_not_compile_the_forward_on_its_own(monkeypatch):
    """transformers' generate compiles the forward by itself on CUDA when the cache is static, with
    its own options; the hf: cases turn that off, so --backend and --mode are what ran. With no GPU
    here, the model's generation config asks transformers to compile on every device (its own
    switch), which takes the same path."""
    import torch
    from transformers import CompileConfig

    from diag.probe import hf

    model = hf.tiny_model("llama", torch.float32, "cpu", 0)
    config = CompileConfig()
    config._compile_all_devices = True
    model.generation_config.compile_config = config
    asked = []

    def compiled_call(*args, **kwargs):
        asked.append(args)
        raise AssertionError("transformers compiled the forward itself")

    monkeypatch.setattr(model, "get_compiled_call", compiled_call)
    prompt = torch.randint(3, 500, (1, 6))
    out = hf.decode(model, prompt, torch.ones_like(prompt), 3)
    assert out.shape == (1, 9) and asked == []


def _tiny(model_type: str):
    from diag.probe import hf

    if model_type not in hf.architectures():
        pytest.skip(f"this transformers has no {model_type}")
    return hf.tiny_config(model_type)


def test_what_a_config_derives_when_it_is_made_follows_the_tiny_sizes():
    """The shrink sets fields on the default config, then has the config class make it again from the
    fields it changed: what the class derives from them (hrm_text's layers per stack, xlstm's block
    count, zamba2's hybrid layer ids) follows the tiny sizes, as for a checkpoint. Before, each kept the
    default's value (16 layers per stack, 32 blocks, ids up to 51) and the model did not generate."""
    hrm = _tiny("hrm_text")
    assert hrm.num_layers_per_stack == 2
    xlstm = _tiny("xlstm")
    assert xlstm.num_blocks == xlstm.num_hidden_layers == 2
    # the cache's query-key width (rounded up to 64) is the layers' own (hidden times the factor)
    assert xlstm.qk_dim == xlstm.hidden_size * xlstm.qk_dim_factor
    zamba2 = _tiny("zamba2")
    assert zamba2.hybrid_layer_ids == [i for i, kind in enumerate(zamba2.layers_block_type) if kind == "hybrid"]


def test_per_layer_overrides_are_given_to_the_tiny_layers_and_shrunk():
    """A per-layer override (gemma4's full-attention head size, dots3_note's sliding layers) is keyed
    by the tiny layer of its kind and given the tiny sizes; dots3_note's sliding head size stays the
    sum of its MLA parts, as its config requires."""
    gemma = _tiny("gemma4_text")
    overrides = gemma.to_dict()["per_layer_config"]
    kinds = gemma.layer_types
    assert overrides and all(int(layer) < len(kinds) for layer in overrides)
    assert all(fields.get("head_dim", 16) <= 16 for fields in overrides.values())
    dots = _tiny("dots3_note_text")
    sliding = dots.to_dict()["per_layer_config"][str(dots.layer_types.index("sliding_attention"))]
    assert sliding["num_attention_heads"] == sliding["num_key_value_heads"] == 4
    assert sliding["head_dim"] == sliding["qk_nope_head_dim"] + dots.qk_rope_head_dim


def test_layer_patterns_keep_what_the_model_needs_to_be_measured():
    from diag.probe import tiny

    assert tiny._one_of_each(["linear_attention"] * 32) == ["linear_attention", "full_attention"]
    assert tiny._one_of_each(["linear_attention", "hybrid"] * 8) == ["linear_attention", "hybrid", "hybrid"]
    assert tiny._one_of_each(["hybrid"] * 8) == ["hybrid", "hybrid"]
    assert tiny._one_of_each(["sliding_attention", "full_attention"] * 3) == ["sliding_attention", "full_attention"]
    # the spelling of older releases (granitemoehybrid's default on transformers 5.5)
    assert tiny._one_of_each(["mamba"] * 40) == ["mamba", "attention"]


def test_a_config_asking_for_state_space_kernels_that_are_not_installed_gets_the_reference_path():
    """zamba's default asks for the mamba kernels, and its model (transformers 5.5) refuses to run
    without them; a checkpoint's config says the same, so the shrink turns it off where they are absent."""
    import importlib.util

    from diag.probe import tiny

    assert importlib.util.find_spec("mamba_ssm") is None  # this machine: no kernels
    assert tiny.tiny_config("zamba").use_mamba_kernels is False


def test_a_config_its_class_refuses_to_make_again_is_kept_as_shrunk():
    """Where the class refuses the changed fields together (its own validation), the shrunk config
    stands as it was set, not an error."""
    from transformers import LlamaConfig

    from diag.probe import tiny

    shrunk = LlamaConfig(hidden_size=64, num_attention_heads=4)
    shrunk.num_attention_heads = 5  # 64 is not a multiple of 5: LlamaConfig refuses it when made
    assert tiny._remade(shrunk, LlamaConfig()) is shrunk


@pytest.mark.slow
def test_an_architecture_whose_static_cache_fails_eagerly_decodes_with_its_own_cache_and_says_why(tmp_path):
    """transformers' static cache writes one slot past its end for xlm (index_copy_ out of bounds, on
    the 5.x releases diag was tried with); its generate with the cache it picks by itself works. The
    run is then a compile verdict on that path, and says so, instead of an eager_error."""
    db = tmp_path / "h.db"
    done = diag(
        "run", "--case", "hf:xlm", "--backend", "eager", "--fullgraph", "--no-timing", "--new-tokens", "4",
        "--db", str(db), "--json", cwd=tmp_path,
    )  # fmt: skip
    run = show(db, json.loads(done.stdout)[0]["id"], tmp_path)
    assert run["status"] != "eager_error", run.get("error_message")
    assert run["tokens_equal"] == 1
    assert "with a static cache" in run["case_note"] and "IndexError" in run["case_note"]
    text = diag("show", str(run["id"]), "--db", str(db), cwd=tmp_path).stdout
    assert "the case says: this transformers' generate fails on xlm with a static cache" in text


@pytest.mark.slow
def test_what_a_case_notes_is_stored_once_shown_and_kept_when_the_case_then_fails(tmp_path):
    db = tmp_path / "n.db"
    case = str(TEST_CASES / "noted.py")
    args = ("run", "--case", case, "--backend", "eager", "--no-fullgraph", "--no-timing", "--new-tokens", "3")
    ran = json.loads(diag(*args, "--db", str(db), "--json", cwd=tmp_path).stdout)[0]
    failed = json.loads(
        diag(*args, "--db", str(db), "--json", cwd=tmp_path, env_extra={"DIAG_TEST_NOTED_RAISES": "1"}).stdout
    )[0]
    said = "no cache here: every step recomputes the prefix"
    ok, broken = show(db, ran["id"], tmp_path), show(db, failed["id"], tmp_path)
    assert ok["status"] == "pass" and ok["case_note"] == said
    assert broken["status"] == "eager_error" and broken["case_note"] == said
    assert "the fallback failed as well" in broken["error_message"]
    site = tmp_path / "site"
    diag("report", "--db", str(db), "--out", str(site), cwd=tmp_path)
    assert f"The case says: {said}" in run_section(site, ran["id"])


def test_the_static_cache_trial_leaves_the_model_the_compiled_generation_traces_as_it_was():
    """Before an hf case decodes, an eager trial of generate with a static cache asks whether this
    transformers can take that path. big_bird's first forward on a prompt shorter than its sparse
    blocks switches the model to full attention, warning through its logger: a trial on the model
    itself made that switch before the compile, so dynamo never met the logger call that a fresh
    model makes it trace (a fullgraph_error read as a pass). The trial builds a model of its own."""
    import torch

    from diag.probe import hf

    def attention_types(model) -> dict:
        return {name: getattr(module, "attention_type", None) for name, module in model.named_modules()}

    made = []

    def make():
        made.append(hf.tiny_model("big_bird", torch.float32, "cpu", 0))
        return made[-1]

    model = make()
    before = attention_types(model)
    assert "block_sparse" in before.values()
    prompt = torch.randint(3, 64, (1, 16), generator=torch.Generator().manual_seed(0))
    assert hf.static_cache_refused(make, prompt, torch.ones_like(prompt)) is None
    assert attention_types(model) == before
    assert "original_full" in attention_types(made[-1]).values()  # the trial's own model switched


@pytest.mark.slow
@pytest.mark.parametrize(
    "case, hint", [("hf:nope_arch", "(hf:all runs every one)"), ("hf:ALL", "did you mean hf:all?")], ids=["nope", "ALL"]
)
def test_an_architecture_the_transformers_lacks_is_refused_before_any_run(tmp_path, case, hint):
    """Asked of the environment's own transformers (model types are case-sensitive): one line, exit 1,
    no DB, no run; before, each was run and stored as an eager_error."""
    from test_cli_input import assert_one_line_error

    done = diag(
        "run", "--case", case, "--case", "append_last", "--backend", "eager", "--db", "x.db", cwd=tmp_path, check=False
    )
    assert_one_line_error(done, f"{case}: not one of the", "decoder-only causal-LM architectures", hint)
    assert not (tmp_path / "x.db").exists()
