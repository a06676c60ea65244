"""A few runs with the default inductor backend (C++ codegen on CPU; tens of seconds cold)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import diag, show


@pytest.mark.slow
def test_append_last_with_inductor_passes_and_is_timed(tmp_path):
    db = tmp_path / "i.db"
    diag("run", "--case", "append_last", "--fullgraph", "--new-tokens", "6", "--repeats", "2",
         "--db", str(db), cwd=tmp_path)
    run = show(db, 1, tmp_path)
    assert run["backend"] == "inductor"
    assert run["status"] == "pass"
    assert run["graph_break_count"] == 0
    assert run["tokens_equal"] == 1
    assert run["compiled_ms_per_token"] > 0
    # The timing pass compiled cold into this run's own inductor cache; the diagnosis pass after it
    # found the kernels there but still lowered the graph itself, so inductor's output is in its log.
    assert run["compile_s"] > 0 and run["compile_warm_s"] is not None
    frame, = run["frames"]
    assert frame["inductor_compile_time_s"] > 0
    log = (Path(run["artifacts_dir"]) / "torch_debug.log").read_text()
    assert "torch._inductor.graph Output code" in log
