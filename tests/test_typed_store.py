"""The store's types (diag/store/typed.py): generated from the migrated schema, so that a column a
migration adds is a field, and a read of a column that is not there is a type error, caught by the
type checker CI runs, not a KeyError at night."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO

from diag import store
from diag.probe import record_types, records
from diag.store import typed
from diag.store.typing_source import class_name


@pytest.mark.parametrize("generated", ["diag/store/rows.py", "diag/probe/record_types.py"])
def test_the_generated_types_are_current(generated):
    """The tables' types from the migrated schema, the records' from records.KINDS."""
    done = subprocess.run(
        [sys.executable, "-m", "cogapp", "--check", generated], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, f"{generated} is stale: run cog -r {generated}\n" + done.stdout


def test_every_record_kind_has_its_type_with_its_fields():
    for kind in records.KINDS.values():
        typed_record = getattr(record_types, "".join(p.title() for p in kind.name.split("_")) + "Record")
        assert set(typed_record.__annotations__) == set(kind.fields) | {"kind", "v"}, kind.name


def test_every_table_and_column_has_its_field(tmp_path):
    db = store.open_db(tmp_path / "blank.db")
    for table in db.table_names():
        fields = getattr(typed, class_name(table)).__annotations__
        assert list(fields) == [column.name for column in db[table].columns], table


def test_a_stored_run_read_has_only_fields_of_its_type(recorded_db):
    """What ``full_runs`` returns carries no key its type does not name (a read that adds one would
    hand the type checker a run it cannot check)."""
    db = store.open_db(recorded_db, readonly=True)
    named = set(typed.StoredRun.__annotations__) | set(typed.StoredRunColumns.__annotations__)
    for run in store.full_runs(db, [row["id"] for row in store.recent_runs(db, limit=5)]):
        assert set(run) <= named, set(run) - named
        for table in ("graph_breaks", "recompiles", "hidden_errors", "timings", "frames"):
            child = getattr(typed, class_name(table)).__annotations__
            assert all(set(row) <= set(child) for row in run[table]), table


READERS = {
    # a stored run read by a misspelt column (compile_s)
    'TypedDict "StoredRun" has no key "compile_sec"': """
        from diag import store

        def slow(db) -> float:
            run = store.get_run(db, 1)
            assert run is not None
            return run["compile_sec"] or 0.0
        """,
    # a record read by a misspelt field (median_ms_per_token)
    'TypedDict "TimingRecord" has no key "median_ms"': """
        from diag.contract import records
        from diag.run.rundir import PassOutcome

        def median(outcome: PassOutcome) -> float:
            timing = outcome.first(records.TIMING)
            assert timing is not None
            return timing["median_ms"] or 0.0
        """,
}


@pytest.mark.slow  # a type checker run on a snippet: about 2 CPU-s each, as `mypy` over diag/ in .ci/run
@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed (the test extra has it)")
@pytest.mark.parametrize("error", sorted(READERS))
def test_a_misspelt_column_or_record_field_is_a_type_error(tmp_path, error):
    (tmp_path / "reader.py").write_text(textwrap.dedent(READERS[error]))
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent", str(tmp_path / "reader.py")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and error in done.stdout, done.stdout
