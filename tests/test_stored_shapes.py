"""Every reader of a stored artifact (a run's profile and run directory, a race's breakdown) takes its
absence or another shape: the line or page says what is missing, never a traceback. A history merged
from other machines has no run directories; a DB written by another diag, or edited, may hold any
JSON. Real SQLite files and the real command line."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from conftest import diag_here
from test_race import _stored_race

# What diag run --profile stores (profile.summary, with the trace and the top ops), as one real run kept it.
PROFILE = {
    "trace": "profile.trace.json.gz",
    "top": [{"op": "aten::mm", "calls": 120, "self_cpu_us": 1144.4, "self_device_us": 0.0}],
    "seconds": 0.855,
    "ops_ms": [{"aten::mm": 0.0512, "Pregraph bytecode": 0.011}, {"aten::mm": 0.0498, "Pregraph bytecode": 0.0097}],
    "kernels": {"CPU flash": 2.0},
    "refused": {},
    "device_time": False,
}
SHAPES = {
    "as stored": PROFILE,
    "text": "x",
    "fields of other types": {
        "top": "x",
        "ops_ms": {"a": 1},
        "kernels": [1],
        "refused": "x",
        "trace": 5,
        "seconds": "s",
    },
    "items of other types": {
        "ops_ms": [{"a": "x"}, 3],
        "top": [{"op": 1}, 2],
        "kernels": {"k": "x"},
        "refused": {"flash": {"why": "x"}},
        "device_time": "yes",
    },
}


def _set_extra(db: Path, extra) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET extra = ?", (json.dumps(extra),))
    conn.close()


def _ok(folder: Path, *args: str) -> str:
    done = diag_here(*args, cwd=folder)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done.stdout


@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
def test_a_profile_of_any_shape_and_no_run_directory_is_read_by_every_surface(copied_db, shape):
    folder = copied_db.parent
    _set_extra(copied_db, {"profile": SHAPES[shape]})
    shown = _ok(folder, "show", "1", "--db", "copy.db")
    _ok(folder, "show", "1", "--db", "copy.db", "--json")
    _ok(folder, "runs", "--db", "copy.db")
    _ok(folder, "compare", "1", "2", "--db", "copy.db", "--profile")
    _ok(folder, "report", "--db", "copy.db", "--out", "site")
    pages = "".join(page.read_text() for page in (folder / "site").rglob("*.html"))
    if shape == "as stored":  # the recorded runs' directories are not beside this copy of their DB
        assert "compiled step by op group" in shown
        assert "profile.trace.json.gz: the trace is not next to the database" in pages


def test_an_extra_that_is_no_object_is_read_by_every_surface(copied_db):
    _set_extra(copied_db, [1, 2])
    folder = copied_db.parent
    for args in (["show", "1"], ["compare", "1", "2", "--profile"], ["report", "--out", "site"]):
        _ok(folder, *args, "--db", "copy.db")


@pytest.mark.parametrize(
    "stored",
    ["not json", json.dumps([1]), json.dumps({"groups": "x"}), json.dumps({"baseline": "a", "case": "b"})],
    ids=["text", "list", "groups-text", "fields-missing"],
)
def test_a_race_breakdown_of_another_shape_is_left_out_of_the_variants_page(tmp_path, stored):
    db = tmp_path / "r.db"
    _stored_race(db, "2.13.0", 0.05, 6)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE races SET profile = ?", (stored,))
    conn.close()
    _ok(tmp_path, "report", "--db", "r.db", "--out", "site")
    assert (tmp_path / "site" / "variants.html").exists()


@pytest.mark.parametrize("column", ["compile_instructions", "compile_s", "eager_ms_per_token", "graph_break_count"])
def test_a_count_or_time_stored_as_text_is_read_as_missing(copied_db, column):
    """SQLite keeps text in an INTEGER or REAL column: every surface reads it as no figure."""
    with sqlite3.connect(copied_db) as conn:
        conn.execute(f"UPDATE runs SET {column} = 'abc', instructions_method = 'callgrind'")
    conn.close()
    folder = copied_db.parent
    for args in (["show", "1"], ["show", "1", "--json"], ["runs"], ["compare", "1", "2"], ["report", "--out", "site"]):
        _ok(folder, *args, "--db", "copy.db")
    check = diag_here("check", "--db", "copy.db", cwd=folder)
    assert "Traceback" not in check.stderr and check.returncode in (0, 1, 3), check.stderr


def test_frames_torch_could_not_report_are_unknown_on_every_surface_never_zero(copied_db):
    """A torch before 2.4 (or no trace): its compilation metrics were not read, so how many frames it
    compiled is not known; show, --json and the run page say unknown, with why, not 0."""
    why = "no TORCH_TRACE log was written (structured trace needs torch >= 2.3)"
    with sqlite3.connect(copied_db) as conn:
        run_id = conn.execute("SELECT run_id FROM frames LIMIT 1").fetchone()[0]
        conn.execute("DELETE FROM frames WHERE run_id = ?", (run_id,))
        capabilities = json.loads(conn.execute("SELECT capabilities FROM runs WHERE id = ?", (run_id,)).fetchone()[0])
        capabilities["compilation_metrics"] = {"available": False, "detail": why}
        conn.execute("UPDATE runs SET capabilities = ? WHERE id = ?", (json.dumps(capabilities), run_id))
    conn.close()
    folder = copied_db.parent
    shown = _ok(folder, "show", str(run_id), "--db", "copy.db")
    assert f"compiled frames: unknown ({why})" in shown and "compiled frames (0)" not in shown
    assert json.loads(_ok(folder, "show", str(run_id), "--db", "copy.db", "--json"))["frame_count"] is None
    other = json.loads(_ok(folder, "show", "1" if run_id != 1 else "2", "--db", "copy.db", "--json"))
    assert other["frame_count"] == len(other["frames"])
    _ok(folder, "report", "--db", "copy.db", "--out", "site")
    page = "".join(p.read_text() for p in (folder / "site" / "runs").glob("*.html"))
    assert "<h3>Compiled frames: unknown</h3>" in page and "Not known: no TORCH_TRACE log was written" in page


@pytest.mark.parametrize("many", [False, True], ids=["few runs: read by id", "many runs: one scan"])
def test_text_in_a_numeric_column_is_found_among_few_runs_and_many(copied_db, many):
    from diag import store
    from diag.store import queries

    runs = queries.FEW_IDS + 20 if many else 3
    with sqlite3.connect(copied_db) as conn:
        columns = [name for _, name, *_ in conn.execute("PRAGMA table_info(runs)") if name not in ("id", "uid")]
        listed = ", ".join(f'"{c}"' for c in columns)
        while conn.execute("SELECT count(*) FROM runs").fetchone()[0] < runs:
            conn.execute(f"INSERT INTO runs ({listed}) SELECT {listed} FROM runs ORDER BY id LIMIT 1")
        odd = conn.execute("SELECT max(id) FROM runs").fetchone()[0]
        conn.execute("UPDATE runs SET compile_s = 'abc' WHERE id = ?", (odd,))
    conn.close()
    read = store.recent_runs(store.open_db(copied_db), limit=runs)
    assert len(read) >= runs
    assert [r["compile_s"] for r in read if r["id"] == odd] == [None]
    assert all(isinstance(r["compile_s"], (float, type(None))) for r in read)


def test_frames_of_a_run_that_holds_no_note_of_them_are_unknown_not_zero(copied_db):
    """A run whose capabilities do not say torch's compilation metrics were read (pruned, or stored by
    a probe that wrote no such note, as torch 2.0.1 and 2.1 runs were): how many frames it compiled is
    unknown, never 0, on show and --json."""
    with sqlite3.connect(copied_db) as conn:
        run_id = conn.execute("SELECT run_id FROM frames LIMIT 1").fetchone()[0]
        conn.execute("DELETE FROM frames WHERE run_id = ?", (run_id,))
        conn.execute("UPDATE runs SET capabilities = NULL WHERE id = ?", (run_id,))
    conn.close()
    folder = copied_db.parent
    shown = _ok(folder, "show", str(run_id), "--db", "copy.db")
    assert "compiled frames: unknown (the run holds no note" in shown and "compiled frames (0)" not in shown
    assert json.loads(_ok(folder, "show", str(run_id), "--db", "copy.db", "--json"))["frame_count"] is None
