"""diag's counts against torch's own signals, on the four cases x fullgraph on/off (issue: oracle agreement).

Sources of truth inside torch 2.13 (torch/_dynamo/exc.py and symbolic_convert.py):
- a graph break dynamo resumes from is counted in counters["graph_break"]; one it cannot resume
  from stays in counters["unimplemented"]. diag counts graph-break log records, so its count must
  equal the sum of both (where the run did not raise).
- every recompile is a compile of a frame that already has cache entries: a compilation_metrics
  record whose compile id has an attempt number above 0 ("3/1").
- a fullgraph_error run has a compilation_metrics record with a fail_type; a fullgraph=True run that
  passed has none; in a fullgraph=False run every frame that failed fell back to eager, which diag
  must report as a hidden frame_fallback error.
"""

from __future__ import annotations

import pytest

CASES = ["append_last", "dynamic_slice", "hf_static_cache", "hf_dynamic_cache"]
KEYS = [(case, fullgraph) for case in CASES for fullgraph in (True, False)]


@pytest.mark.parametrize("key", KEYS, ids=[f"{c}-{'fg' if f else 'nofg'}" for c, f in KEYS])
def test_graph_break_count_equals_torch_counters(findings, key):
    run = findings[key]
    if run["status"] == "fullgraph_error":
        pytest.skip("dynamo raised instead of breaking the graph")
    counters = run["counters"]
    torch_count = sum(counters.get("graph_break", {}).values()) + sum(counters.get("unimplemented", {}).values())
    assert run["graph_break_count"] == torch_count


@pytest.mark.parametrize("key", KEYS, ids=[f"{c}-{'fg' if f else 'nofg'}" for c, f in KEYS])
def test_recompile_count_equals_compilation_metrics(findings, key):
    run = findings[key]
    assert run["capabilities"]["compilation_metrics"]["available"] is True
    recompiled = [f for f in run["frames"] if int(f["compile_id"].split("/")[1]) > 0]
    assert run["recompile_count"] == len(recompiled)
    assert run["recompile_count"] == len(run["recompiles"])


@pytest.mark.parametrize("key", KEYS, ids=[f"{c}-{'fg' if f else 'nofg'}" for c, f in KEYS])
def test_fullgraph_verdict_agrees_with_fail_type(findings, key):
    run = findings[key]
    failed = [f for f in run["frames"] if f["fail_type"]]
    if run["status"] == "fullgraph_error":
        assert failed, run["frames"]
        assert any(run["error_type"] in (f["fail_type"] or "") for f in failed)
    elif run["fullgraph"]:
        assert failed == []
    elif failed:
        fallbacks = [h for h in run["hidden_errors"] if h["source"] == "frame_fallback"]
        assert {f["co_name"] for f in failed} <= {_function_at(h) for h in fallbacks}, (failed, fallbacks)


def _function_at(hidden: dict) -> str:
    """The function a frame_fallback hidden error names ("WON'T CONVERT <fn> <file> line <n>")."""
    text = hidden["traceback"] or ""
    marker = "WON'T CONVERT "
    return text[text.index(marker) + len(marker) :].split()[0] if marker in text else ""


def test_graph_count_equals_successful_frame_compiles(findings):
    for key in KEYS:
        run = findings[key]
        compiled = [f for f in run["frames"] if not f["fail_type"] and (f["graph_op_count"] or 0) > 0]
        assert run["graph_count"] == len(compiled), (key, run["graph_count"], run["frames"])
