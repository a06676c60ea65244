"""A few runs with the default inductor backend (C++ codegen on CPU; tens of seconds cold)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TEST_CASES, diag, show


@pytest.mark.slow
def test_append_last_with_inductor_passes_and_is_timed(tmp_path):
    db = tmp_path / "i.db"
    diag(
        "run",
        "--case",
        "append_last",
        "--fullgraph",
        "--new-tokens",
        "6",
        "--repeats",
        "2",
        "--db",
        str(db),
        cwd=tmp_path,
    )
    run = show(db, 1, tmp_path)
    assert run["backend"] == "inductor"
    assert run["status"] == "pass"
    assert run["graph_break_count"] == 0
    assert run["tokens_equal"] == 1
    assert run["compiled_ms_per_token"] > 0
    # The timing pass compiled cold into this run's own inductor cache and torch logged nothing while
    # it did, so the diagnosis pass took the compiled graph from the cache: dynamo traced again with
    # every log on, inductor did not lower again (its output code is not in the log).
    assert run["compile_s"] > 0 and run["compile_warm_s"] is not None
    (frame,) = run["frames"]
    # AOTAutograd's cache served the compiled graph: inductor never ran in the diagnosis pass
    assert frame["entire_frame_compile_time_s"] > 0 and frame["inductor_compile_time_s"] is None
    lowering = run["capabilities"]["lowering_logs"]
    assert lowering["available"] is False and "reused" in lowering["detail"]
    log = (Path(run["artifacts_dir"]) / "torch_debug.log").read_text()
    assert "torch._inductor.graph Output code" not in log
    assert "torch._dynamo" in log
    # depyf is installed but was not asked for: no dump, and the run says why
    assert run["capabilities"]["depyf"] == {"available": False, "detail": run["capabilities"]["depyf"]["detail"]}
    assert "not asked for" in run["capabilities"]["depyf"]["detail"]
    assert not (Path(run["artifacts_dir"]) / "depyf").exists()


FAST = ("--fullgraph", "--new-tokens", "2", "--repeats", "1", "--timing-seconds", "0")


def _swallowed(run: dict) -> list[dict]:
    return [h for h in run["hidden_errors"] if h["exc_type"] == "RuntimeError" and "could not fuse" in h["message"]]


@pytest.mark.slow
def test_a_warning_while_the_timing_pass_lowered_makes_the_diagnosis_lower_again(tmp_path):
    """inductor swallows an exception in a lowering that succeeds and logs it at WARNING: the timing
    pass (logs off) notices that torch said something, so the diagnosis lowers again and stores the
    swallowed exception, instead of taking the graph from the cache and never seeing it."""
    db = tmp_path / "w.db"
    diag("run", "--case", str(TEST_CASES / "lowering_warning.py"), *FAST, "--db", str(db), cwd=tmp_path)
    run = show(db, 1, tmp_path)
    assert run["status"] == "pass"
    lowering = run["capabilities"]["lowering_logs"]
    assert lowering["available"] is True
    assert "WARNING torch._inductor.fx_passes.post_grad (RuntimeError)" in lowering["detail"]
    (swallowed,) = _swallowed(run)
    assert swallowed["source"] == "swallowed_exception"


@pytest.mark.slow
def test_an_exception_logged_only_at_debug_while_lowering_needs_no_reuse(tmp_path):
    """The limit of reuse, stated and tested: an exception torch logs only at DEBUG inside a lowering
    that succeeds is invisible to the timing pass, so the reused graph hides it; --no-reuse-compiled
    lowers again and finds it."""
    db = tmp_path / "d.db"
    case = str(TEST_CASES / "lowering_debug.py")
    diag("run", "--case", case, *FAST, "--db", str(db), cwd=tmp_path)
    diag("run", "--case", case, *FAST, "--no-reuse-compiled", "--db", str(db), cwd=tmp_path)
    reused, lowered = show(db, 1, tmp_path), show(db, 2, tmp_path)
    assert reused["capabilities"]["lowering_logs"]["available"] is False
    assert _swallowed(reused) == []
    assert lowered["capabilities"]["lowering_logs"]["available"] is True
    assert "--no-reuse-compiled" in lowered["capabilities"]["lowering_logs"]["detail"]
    assert len(_swallowed(lowered)) == 1
    assert reused["status"] == lowered["status"] == "pass"
