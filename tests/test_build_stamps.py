"""Per-build stamps (store/schema.py, ``m018_build_stamps``): every write that touches a build's
runs, what they found, or the build itself gives that build a new stamp, and leaves every other
build's stamp as it was. A render trusts an unchanged stamp to mean unchanged data."""

from __future__ import annotations

import datetime as dt
import random
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

from diag import store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import synthetic  # after sys.path names bench/

ROW = {"case": "append_last", "backend": "aot_eager", "fullgraph": 0, "dtype": "float32"}
NIGHTS = 4


def _history(path: Path) -> tuple[store.sqlite_utils.Database, list[int]]:
    """Four nightlies, two runs each (one of them with a graph break, a recompile and timings)."""
    rng = random.Random(0)
    records = []
    for day in range(NIGHTS):
        build = synthetic.nightly(day, rng, start=dt.date(2027, 3, 1))
        for repeat in range(2):
            records.append(synthetic.record(build, f"n{day}-{repeat}", ROW, "graph_break", rng))
    db = store.open_db(path)
    store.save_runs(db, records)
    builds = [b["id"] for b in sorted(store.builds(db), key=lambda b: b["version"])]
    return db, builds


def _run_of(db, build_id: int) -> int:
    return db.execute("SELECT min(id) FROM runs WHERE torch_build_id = ?", [build_id]).fetchone()[0]


WRITES = {
    "a run's status": "UPDATE runs SET status = 'crash' WHERE id = {run}",
    "a run's error text cut short": "UPDATE runs SET error_message = 'x' WHERE id = {run}",
    "a run deleted": ";".join(f'DELETE FROM "{t}" WHERE run_id = {{run}}' for t in store.CHILD_TABLES)
    + "; DELETE FROM runs WHERE id = {run}",
    "a run moved to another build": "UPDATE runs SET torch_build_id = {other} WHERE id = {run}",
    "a graph break's reason": "UPDATE graph_breaks SET reason = 'other' WHERE run_id = {run}",
    "a graph break added": "INSERT INTO graph_breaks (run_id, key, reason) VALUES ({run}, 'GB9999', 'new')",
    "a graph break deleted": "DELETE FROM graph_breaks WHERE run_id = {run}",
    "a recompile's reason": "UPDATE recompiles SET reason = 'other' WHERE run_id = {run}",
    "a hidden error added": "INSERT INTO hidden_errors (run_id, key, message) VALUES ({run}, 'TypeError:x', 'm')",
    "a timing's samples dropped": "UPDATE timings SET samples = NULL WHERE run_id = {run}",
    "the build's version": "UPDATE torch_builds SET git_version = 'f' || git_version WHERE id = {build}",
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_write_restamps_the_build_it_touches_and_no_other(tmp_path, write):
    db, builds = _history(tmp_path / "history.db")
    target, other = builds[1], builds[3]
    before = store.build_stamps(db)
    assert set(builds) <= set(before)
    with db.conn:
        for statement in WRITES[write].format(run=_run_of(db, target), build=target, other=other).split(";"):
            db.execute(statement)
    after = store.build_stamps(db)
    assert after[target] != before[target]
    moved = {other} if "moved" in write else set()
    assert {b for b in builds if after[b] != before[b]} == {target} | moved


def _contents(db) -> dict[int, str]:
    """Per build, every row of its runs and of what they found, as text."""
    found: dict[int, list] = {}
    for run in db.execute("SELECT * FROM runs ORDER BY id").fetchall():
        found.setdefault(run[2], []).append(run)
    owner = dict(db.execute("SELECT id, torch_build_id FROM runs").fetchall())
    for table in store.CHILD_TABLES:
        for row in db.execute(f'SELECT * FROM "{table}" ORDER BY id').fetchall():
            found.setdefault(owner[row[1]], []).append((table, *row))
    return {build: repr(rows) for build, rows in found.items()}


def test_a_new_nightly_and_a_prune_restamp_every_build_whose_data_they_change(tmp_path):
    db, builds = _history(tmp_path / "history.db")
    assert db.execute("SELECT name FROM pragma_table_info('runs') WHERE cid = 2").fetchone()[0] == "torch_build_id"
    before, contents = store.build_stamps(db), _contents(db)
    rng = random.Random(1)
    newest = synthetic.nightly(NIGHTS, rng, start=dt.date(2027, 3, 1))
    store.save_runs(db, [synthetic.record(newest, "n-new", ROW, "pass", rng)])
    after = store.build_stamps(db)
    assert {b: after[b] for b in builds} == {b: before[b] for b in builds}
    assert len(after) == len(before) + 1
    contents = _contents(db)
    store.prune(db, keep_builds=1, keep_runs=1, thin_after=0)
    pruned, changed = store.build_stamps(db), _contents(db)
    differ = {b for b in contents if changed.get(b) != contents[b]}
    assert differ  # prune compacted or folded the older nightlies
    assert {b for b in differ if pruned[b] == after[b]} == set()
    assert {b for b in after if pruned[b] != after[b]} == differ


def test_an_older_db_gets_stamps_and_triggers_when_migrated(tmp_path):
    """A DB written before stamps existed: migrated, every build has a stamp, and writes restamp."""
    path = tmp_path / "old.db"
    db, builds = _history(path)
    db.conn.close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DROP TABLE build_stamps")
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
            conn.execute(f'DROP TRIGGER "{name}"')
        conn.execute("DELETE FROM migrations WHERE name = 'm018_build_stamps'")
    conn.close()
    db = store.open_db(path)
    before = store.build_stamps(db)
    assert set(before) == set(builds)
    with db.conn:
        db.execute("UPDATE runs SET status = 'crash' WHERE id = ?", [_run_of(db, builds[0])])
    assert store.build_stamps(db)[builds[0]] != before[builds[0]]


def test_two_copies_written_apart_never_share_a_stamp(tmp_path):
    """Stamps are random, not counts: the same write made to two copies gives each its own stamp."""
    db, builds = _history(tmp_path / "a.db")
    db.conn.close()
    shutil.copy(tmp_path / "a.db", tmp_path / "b.db")
    stamps = []
    for name in ("a.db", "b.db"):
        copy = store.open_db(tmp_path / name)
        with copy.conn:
            copy.execute("UPDATE runs SET status = 'crash' WHERE id = ?", [_run_of(copy, builds[2])])
        stamps.append(store.build_stamps(copy)[builds[2]])
        copy.conn.close()
    assert stamps[0] != stamps[1]
