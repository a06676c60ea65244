"""A few runs with the default inductor backend (C++ codegen on CPU; tens of seconds cold). README's
set-up command, inductor on append_last, is checked in tests/test_readme.py."""

from __future__ import annotations

import pytest
from conftest import TEST_CASES, diag, show

FAST = ("--fullgraph", "--new-tokens", "2", "--repeats", "1", "--timing-seconds", "0")


def _swallowed(run: dict) -> list[dict]:
    return [h for h in run["hidden_errors"] if h["exc_type"] == "RuntimeError" and "could not fuse" in h["message"]]


@pytest.mark.slow
def test_a_warning_while_the_timing_pass_lowered_makes_the_diagnosis_lower_again(tmp_path):
    """inductor swallows an exception in a lowering that succeeds and logs it at WARNING: the timing
    pass (logs off) notices that torch said something, so the diagnosis lowers again and stores the
    swallowed exception, instead of taking the graph from the cache and never seeing it."""
    db, temp = tmp_path / "w.db", tmp_path / "tmp"
    temp.mkdir()
    case = str(TEST_CASES / "lowering_warning.py")
    done = diag(
        "run", "--case", case, *FAST, "--repeat", "2", "--db", str(db), cwd=tmp_path, env_extra={"TMPDIR": str(temp)}
    )
    # two runs forked from one probe parent, which imported inductor with the user's $TMPDIR: each
    # run's cold compile built inductor's precompiled headers in its own folder, never in $TMPDIR
    # (where the first run of a machine left 149 MB that every later run reused: 24.5 CPU-s, then 19.5)
    assert "precompiled_headers" not in {p.name for p in temp.rglob("*")}, done.stderr
    assert (
        "forked from the environment's probe parent" in show(db, 2, tmp_path)["capabilities"]["probe_process"]["detail"]
    )
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
