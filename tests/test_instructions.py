"""``diag run --count-instructions``: the cold compile's instructions, counted by a real callgrind
(this host gives no hardware counter) or said to be uncountable, stored, shown and on the run page.
Real subprocesses, real valgrind."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import diag, show
from factories import small

VALGRIND = shutil.which("valgrind")


def _counted_run(tmp_path: Path, *extra: str, env_extra=None) -> tuple[Path, dict]:
    db = tmp_path / "i.db"
    done = diag(
        "run",
        "--case",
        "append_last",
        *small(new_tokens=3, prompt_length=4),
        "--count-instructions",
        *extra,
        "--db",
        str(db),
        "--json",
        cwd=tmp_path,
        env_extra=env_extra,
    )
    (listed,) = json.loads(done.stdout)
    return db, show(db, listed["id"], tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(VALGRIND is None, reason="valgrind is not installed (apt-get install valgrind)")
def test_the_cold_compile_is_counted_under_callgrind_and_shown(tmp_path):
    from diag.probe import compat

    db, run = _counted_run(tmp_path)
    how, _ = compat.instruction_method()
    assert run["instructions_method"] == how  # callgrind here; perf where the host has a counter
    # a compile of the tiny Llama through dynamo executes tens of millions of instructions at least
    assert run["compile_instructions"] > 10_000_000 and run["instructions_note"] is None
    assert run["status"] == "pass"
    shown = diag("show", str(run["id"]), "--db", str(db), cwd=tmp_path).stdout
    assert f"compile instructions: {run['compile_instructions']:,} ({how})" in shown
    assert f"instruction_count: yes — {how}" in shown
    site = tmp_path / "site"
    diag("report", "--db", str(db), "--out", str(site), cwd=tmp_path)
    pages = "".join(p.read_text() for p in site.rglob("*.html"))
    assert f"{run['compile_instructions']:,} ({how})" in pages and "Compile instructions" in pages


@pytest.mark.slow
def test_a_host_with_no_method_says_so_and_nothing_else_changes(tmp_path):
    """No hardware counter here, and valgrind kept off PATH: the run is stored as without the option,
    with the reason in its capabilities and in instructions_note."""
    python_dir = str(Path(os.sys.executable).parent)
    db, run = _counted_run(tmp_path, env_extra={"PATH": python_dir})
    assert run["status"] == "pass" and run["compile_instructions"] is None
    assert "valgrind is not installed" in run["instructions_note"]
    said = run["capabilities"]["instruction_count"]
    assert not said["available"] and "valgrind is not installed" in said["detail"]
    shown = diag("show", str(run["id"]), "--db", str(db), cwd=tmp_path).stdout
    assert "compile instructions: none counted (" in shown and "instruction_count: NO" in shown


@pytest.mark.slow
def test_a_case_that_does_not_compile_is_not_counted(tmp_path):
    """A fullgraph error: the count pass is not started; the run says why there is no count."""
    db = tmp_path / "i.db"
    done = diag(
        "run",
        "--case",
        "dynamic_slice",
        *small(new_tokens=3, prompt_length=4),
        "--count-instructions",
        "--db",
        str(db),
        "--json",
        cwd=tmp_path,
    )
    (listed,) = json.loads(done.stdout)
    run = show(db, listed["id"], tmp_path)
    assert run["status"] == "fullgraph_error" and run["compile_instructions"] is None
    if run["instructions_method"] is not None:
        said = "not counted: the diagnosis found no compile that completes (fullgraph_error)"
        assert run["instructions_note"] == said
