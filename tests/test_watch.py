"""Cases that do not own the decode loop: ``gen.watch`` around a third-party ``generate``, with the
case's own model and prompt. Real subprocess runs of ``diag run``; the model class is written here,
as a library's would be, with its own generate loop that masks a token the raw argmax prefers."""

from __future__ import annotations

import json
import textwrap

import pytest
from conftest import diag, show

LIBRARY = '''
"""A third-party causal LM: its own weights, its own generate loop, no transformers."""
import torch


class TinyLM(torch.nn.Module):
    def __init__(self, vocab=64, width=32, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Embedding(vocab, width)
        self.mix = torch.nn.Linear(width, width)
        self.out = torch.nn.Linear(width, vocab)
        self.banned = 3
        with torch.no_grad():
            self.out.bias[self.banned] += 100.0  # the raw argmax would always pick the banned token

    def forward(self, input_ids):
        hidden = torch.tanh(self.mix(self.embed(input_ids))).cumsum(dim=1)  # no cache: the whole prefix
        return self.out(hidden)

    @torch.no_grad()
    def generate(self, input_ids, max_new_tokens):
        for _ in range(max_new_tokens):
            logits = self(input_ids)[:, -1]
            logits[:, self.banned] = float("-inf")  # the loop's own masking
            input_ids = torch.cat([input_ids, logits.argmax(-1, keepdim=True)], dim=1)
        return input_ids
'''

CASE = """
import torch
from diag.probe.cases import case
from thirdparty import TinyLM


@case("third_party_generate", "a library's own generate loop, watched")
def generate(gen):
    model, prompt = TinyLM(), torch.randint(4, 64, (gen.batch_size, gen.prompt_length))
    with gen.watch(model):
        out = gen.chosen(model.generate(prompt, gen.new_tokens))
    if not torch.equal(torch.cat(gen.tokens, 1), out[:, prompt.shape[1]:]):
        raise AssertionError(f"recorded {torch.cat(gen.tokens, 1).tolist()}, the loop chose {out.tolist()}")
"""


@pytest.mark.slow
def test_a_generate_loop_the_case_does_not_own_is_watched_in_three_lines(tmp_path):
    (tmp_path / "thirdparty.py").write_text(textwrap.dedent(LIBRARY))
    (tmp_path / "watched.py").write_text(textwrap.dedent(CASE))
    db = tmp_path / "w.db"
    done = diag(
        "run",
        "--case",
        str(tmp_path / "watched.py"),
        "--backend",
        "eager",
        "--no-fullgraph",
        "--new-tokens",
        "5",
        "--prompt-length",
        "6",
        "--batch-size",
        "2",
        "--no-timing",
        "--db",
        str(db),
        "--json",
        cwd=tmp_path,
    )
    listed = json.loads(done.stdout)
    run = show(db, listed[0]["id"], tmp_path)
    assert run["status"] == "pass", (run["status"], run.get("error_message"))
    # eager and compiled agree on the loop's tokens (never the banned one the raw argmax prefers)
    assert run["tokens_equal"] == 1 and run["oracle_equal"] is None
    assert "own model without transformers' generate" in run["capabilities"]["generate_oracle"]["detail"]
    # the prefill compiles at length 6; decode step 0 (length 7) recompiles once, marking the length
    # dynamic; no later step recompiles
    assert [r["decode_step"] for r in run["recompiles"]] == [0]
    assert run["recompile_count"] == 1


@pytest.mark.slow
def test_timing_pass_times_each_watched_decode_step(tmp_path):
    (tmp_path / "thirdparty.py").write_text(textwrap.dedent(LIBRARY))
    (tmp_path / "watched.py").write_text(textwrap.dedent(CASE))
    db = tmp_path / "w.db"
    done = diag(
        "run",
        "--case",
        str(tmp_path / "watched.py"),
        "--backend",
        "eager",
        "--no-fullgraph",
        "--new-tokens",
        "5",
        "--prompt-length",
        "6",
        "--db",
        str(db),
        "--json",
        "--repeats",
        "2",
        cwd=tmp_path,
    )
    run = show(db, json.loads(done.stdout)[0]["id"], tmp_path)
    steps = [t for t in run["timings"] if t["metric"] == "decode_step" and t["mode"] == "compiled"]
    assert steps and len(steps[0]["samples"]) % 4 == 0  # 4 decode steps per generation, the prefill apart
    assert run["compiled_ms_per_token"] is not None


@pytest.mark.slow
def test_repro_carries_the_modules_next_to_the_case(tmp_path):
    (tmp_path / "thirdparty.py").write_text(textwrap.dedent(LIBRARY))
    (tmp_path / "watched.py").write_text(textwrap.dedent(CASE))
    db = tmp_path / "w.db"
    done = diag(
        "run",
        "--case",
        str(tmp_path / "watched.py"),
        "--backend",
        "eager",
        "--fullgraph",
        "--new-tokens",
        "4",
        "--no-timing",
        "--db",
        str(db),
        "--json",
        cwd=tmp_path,
    )
    run_id = json.loads(done.stdout)[0]["id"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    diag("repro", str(run_id), "--db", str(db), "-o", str(elsewhere / "repro.py"), cwd=tmp_path)
    (tmp_path / "thirdparty.py").unlink()  # the repro must not reach back for it
    import subprocess
    import sys

    ran = subprocess.run(
        [sys.executable, "repro.py"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "tokens equal eager: True" in ran.stdout


def test_the_watched_forward_keeps_the_models_signature():
    """transformers' generate refuses keyword arguments the forward does not name (it reads its
    signature): inside watch, the forward still names what the model's own does."""
    import inspect

    import torch

    from diag.probe.cases import Generation

    class Model(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            return torch.zeros(input_ids.shape[0], input_ids.shape[1], 8)

    model, ids = Model(), torch.zeros(1, 3, dtype=torch.long)
    gen = Generation(model, ids, ids, 2, lambda fn: fn)
    with gen.watch(model):
        assert list(inspect.signature(model.forward).parameters) == ["input_ids", "attention_mask"]
        model(ids)
    assert "forward" not in vars(model)  # the class's forward again after the block
