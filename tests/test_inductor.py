"""A few runs with the default inductor backend (C++ codegen on CPU; tens of seconds cold)."""

from __future__ import annotations

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
