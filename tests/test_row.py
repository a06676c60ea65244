"""One row definition: the report and the gate group runs the same way, by every field that was run."""

from __future__ import annotations

import json

from conftest import NIGHTLY, cli, recorded, replay

from diag import row as rows
from diag import store
from diag.report.history import build_matrix
from diag.verdicts import gate


def _respec(run_dir, **changes):
    spec = json.loads((run_dir / "spec.json").read_text())
    spec["config"].update(changes.pop("config", {}))
    spec.update(changes)
    (run_dir / "spec.json").write_text(json.dumps(spec))
    return run_dir


def test_other_sizes_and_a_same_named_user_case_are_other_rows_in_report_and_check(tmp_path):
    runs = tmp_path / "runs"
    failing = "dynamic_slice-fullgraph"
    dirs = [
        recorded("append_last-fullgraph", runs, "a"),  # batch 2, passes, on 2.13.0
        recorded("append_last-fullgraph", runs, "b", NIGHTLY),  # batch 2, passes, on the nightly
        _respec(recorded("append_last-fullgraph", runs, "c", NIGHTLY, failing), config={"batch_size": 8}),
        _respec(recorded("append_last-fullgraph", runs, "d", NIGHTLY, failing), case_source="/home/me/append_last.py"),
    ]
    db_path = tmp_path / "rows.db"
    replay(dirs, db_path)
    db = store.open_db(db_path)
    every_run = list(store.full_runs(db, [r["id"] for r in db.query("SELECT id FROM runs")]))

    matrix = build_matrix(store.builds(db), store.report_runs(db), store.finding_keys(db))
    builds = sorted(store.builds(db), key=lambda b: b["id"])
    by_build = [[r for r in every_run if r["torch_build_id"] == b["id"]] for b in builds]
    gate_rows = {c.row for c in gate.compare_build_runs(*by_build)}
    assert set(matrix.rows) == gate_rows == {rows.of(r) for r in every_run}
    assert len(gate_rows) == 3
    # Neither the batch-8 failure nor the user's file shares the batch-2 built-in row: no false transition.
    assert matrix.transitions == []
    labels = {rows.label(row) for row in gate_rows}
    assert "append_last [/home/me/append_last.py] aot_eager fullgraph cpu float32 b2 p8 n4" in labels
    assert "append_last aot_eager fullgraph cpu float32 b8 p8 n4" in labels
    done = cli("check", "--db", str(db_path))
    assert done.exit_code == 0 and "no regressions" in done.output


def test_the_datasette_view_holds_the_newest_run_per_row_and_build(tmp_path):
    runs = tmp_path / "runs"
    dirs = [recorded("append_last-fullgraph", runs, tag) for tag in ("a", "b")]
    dirs.append(_respec(recorded("append_last-fullgraph", runs, "c"), config={"batch_size": 8}))
    db_path = tmp_path / "view.db"
    ids = replay(dirs, db_path)
    latest = list(store.open_db(db_path).query("SELECT id, batch_size, torch_version FROM latest_status ORDER BY id"))
    assert [(r["id"], r["batch_size"]) for r in latest] == [(ids[1], 2), (ids[2], 8)]
    assert latest[0]["torch_version"] == "2.13.0+cpu"


def test_a_row_s_stored_columns_are_its_fields():
    """row.RowColumns (the columns' types, for the type checker) names the fields of row.Row, in order."""
    assert tuple(rows.RowColumns.__annotations__) == rows.FIELDS
