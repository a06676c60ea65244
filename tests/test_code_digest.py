"""The code a run compiled, as one digest (``code_digest``, from the structured trace): the same
build and workload compile the same code run after run; another workload, other code. Real probes;
the normalisation itself on a graph's code as torch prints it."""

from __future__ import annotations

import json

import pytest
from conftest import diag, show
from factories import small

from diag import signal
from diag.run import trace

GRAPH = """class GraphModule(torch.nn.Module):
    def forward(self, L_x_: "f32[s53, 8][8, 1]cpu", s97: "Sym(s53)"):
        # File: /work/run-7f3a/case.py:12 in step, code: return x.relu() * 2
        relu = L_x_.relu();  L_x_ = None
        mul = relu * 2;  relu = None
        # kernel path: /tmp/torchinductor_root/ab/cabc0123456789.py
        return (mul, 0x7f3a2b1c4d50)
"""


def test_the_same_code_printed_by_another_run_normalises_the_same_and_a_changed_op_does_not():
    moved = (
        GRAPH.replace("/work/run-7f3a", "/home/ci/run-0001")
        .replace("s53", "s12")
        .replace("s97", "s40")
        .replace("0x7f3a2b1c4d50", "0x55d0aa01bc10")
        .replace("ab/cabc0123456789", "zz/czz9876543210")
    )
    assert trace.normalized_code(moved) == trace.normalized_code(GRAPH)
    assert "File:" not in trace.normalized_code(GRAPH) and "s0" in trace.normalized_code(GRAPH)
    assert trace.normalized_code(GRAPH.replace("relu * 2", "relu * 3")) != trace.normalized_code(GRAPH)
    # two symbols keep apart after renumbering
    assert trace.normalized_code(GRAPH.replace("s97", "s53")) != trace.normalized_code(GRAPH)


def test_a_run_without_a_trace_says_why_its_code_is_not_known(tmp_path):
    assert trace.code_of(tmp_path / "trace") == {
        "code_digest": None,
        "code_note": "no TORCH_TRACE log was written (structured trace needs torch >= 2.3)",
    }
    assert trace.code_of(tmp_path / "trace", compiled=False)["code_note"] == "nothing was compiled"
    on_code = signal.parse("code")
    assert on_code.text == "code" and on_code.read({"code_note": "nothing was compiled"}) == (
        "not known: nothing was compiled"
    )
    assert on_code.said(on_code.read({"code_digest": "ab12"})) == "code ab12"


@pytest.mark.slow
def test_the_same_workload_compiles_the_same_code_and_another_workload_other_code(tmp_path):
    db = tmp_path / "c.db"
    ids = []
    for prompt_length in (6, 6, 9):
        done = diag(
            "run", "--case", "append_last", *small(prompt_length=prompt_length), "--db", str(db), "--json", cwd=tmp_path
        )
        ids.append(json.loads(done.stdout)[0]["id"])
    runs = [show(db, run_id, tmp_path) for run_id in ids]
    digests = [run["code_digest"] for run in runs]
    assert digests[0] == digests[1] and digests[2] != digests[0] and len(digests[0]) == 16, digests
    assert runs[0]["code_note"] == "1 graph: dynamo's graph code"
    shown = diag("show", str(ids[0]), "--db", str(db), cwd=tmp_path).stdout
    assert f"compiled code: {digests[0]} (1 graph: dynamo's graph code)" in shown
