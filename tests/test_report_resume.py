"""A render that takes the matrix up from the state the render before it kept (report/history.py,
report/resume.py) reads only the runs of the builds after that state, and makes the same site,
byte for byte, as a render from scratch: over histories of random nights (repeats that disagree,
rows that come and go, CPU and CUDA builds, two Pythons, hidden errors, changing findings), over
the story history, and after each kind of change to the builds it settled."""

from __future__ import annotations

import datetime as dt
import json
import random
import sqlite3
import sys
from pathlib import Path

import pytest
from conftest import site_files
from test_report_archive import NIGHT, Read, _add_night, _history, _publish, counted_reads

from diag import store
from diag.build import identity
from diag.report import charts, resume

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import synthetic  # after sys.path names bench/

ROWS = [
    {"case": case, "backend": backend, "fullgraph": fullgraph, "dtype": "float32"}
    for case in ("append_last", "dynamic_slice", "hf:llama")
    for backend in ("inductor", "aot_eager")
    for fullgraph in (1, 0)
]
STATUSES = ["pass", "pass", "pass", "graph_break", "compile_error", "crash", "fullgraph_error"]


@pytest.fixture
def read(monkeypatch) -> Read:
    """How many runs each render read from the DB. Each case's charts draw twelve builds in detail,
    more than the four the run pages show and the page of four builds of most tests: the charts take
    what they draw of builds the state settled from the memo, so the state is kept all the same."""
    monkeypatch.setattr(charts, "DETAIL_BUILDS", 12)
    return counted_reads(monkeypatch)


def _night(rng: random.Random, day: int) -> list[store.RunRecord]:
    """One random night: a CPU nightly and, some nights, a CUDA build of it; each row run 0-3 times."""
    found = []
    version = f"2.9.0.dev{dt.date(2026, 1, 1) + dt.timedelta(days=day):%Y%m%d}"
    commit = f"{rng.getrandbits(160):040x}"
    builds = [identity(version, commit, None)] + ([identity(version, commit, "12.6")] if rng.random() < 0.3 else [])
    for build in builds:
        for index, row in enumerate(ROWS):
            if (index == 5 and day < 6) or (index == 7 and day > 9) or rng.random() < 0.1:
                continue  # a row added late, one retired, one skipped now and then
            for repeat in range(rng.choice([1, 1, 1, 2, 3])):
                status = rng.choice(STATUSES)
                error = None if status in ("pass", "graph_break") else ("TypeError", rng.choice(["guards", "slice"]))
                transformers = "4.56.2" if day < 5 else rng.choice(["4.57.0", "4.57.0", "4.58.0"])
                record = synthetic.record(build, f"r{day}-{build['variant']}-{index}-{repeat}", row, status, rng,
                                          error, transformers)  # fmt: skip
                record.run["python"] = rng.choice(["3.11.7", "3.11.7", "3.10.4"])
                if rng.random() < 0.15:
                    record.hidden_errors.append(
                        {"key": rng.choice(["TypeError:guards", "KeyError:x"]), "exc_type": "TypeError",
                         "message": "VariableBuilder.__init__() got an unexpected keyword argument 'guards'",
                         "count": 1}
                    )  # fmt: skip
                if rng.random() < 0.2:
                    record.recompiles[0]["key"] = f"Recompile:{rng.choice(['a1', 'b2'])}"
                found.append(record)
    return found


def _taken_up(read: Read, path: Path) -> bool:
    """Whether the render just made read only some of the runs, once: it took the matrix up."""
    total = sqlite3.connect(path).execute("SELECT count(*) FROM runs").fetchone()[0]
    return len(read) == 1 and read[0] < total


def _same_as_from_scratch(path: Path, out: Path, scratch: Path, per_page: int = 3) -> None:
    _publish(path, scratch, per_page)
    assert site_files(out) == site_files(scratch)


def _counts(path: Path) -> tuple[int, int]:
    """How many builds and cases the DB at ``path`` has runs of."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute('SELECT count(DISTINCT torch_build_id), count(DISTINCT "case") FROM runs').fetchone()
    finally:
        conn.close()


@pytest.mark.slow  # renders a history night by night: a property run, not a unit
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_random_history_night_by_night_is_the_same_as_from_scratch(tmp_path, read, seed):
    rng = random.Random(seed)
    path, out = tmp_path / "history.db", tmp_path / "site"
    db = store.open_db(path)
    nights = []  # per night after a state was kept: whether it added one build and no case, and took it up
    for day in range(16):
        builds, cases = _counts(path)
        store.save_runs(db, _night(rng, day))
        db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        kept = (out / resume.FOLD).is_file()
        read.clear()
        _publish(path, out, per_page=4)
        if kept:
            nights.append((_counts(path) == (builds + 1, cases), _taken_up(read, path)))
        if _taken_up(read, path):
            # the run pages' four builds and one more, and at most the three that close an archive
            # page of four: never as far back as the charts' twelve
            assert read.builds[0] <= 8
        _same_as_from_scratch(path, out, tmp_path / f"scratch{day}", per_page=4)
    # once a state is kept, every night of one build reads only the newest builds' runs, the nights
    # that add a whole page of four builds to the archive or a row too; but a night that brings a
    # new case (named in every page's navigation) or two builds starts from scratch where it must
    assert sum(plain for plain, _ in nights) >= 5
    assert all(taken for plain, taken in nights if plain), nights


@pytest.mark.slow  # renders a history night by night: a property run, not a unit
def test_the_story_night_by_night_is_the_same_as_from_scratch(tmp_path, read):
    """With an archive page every three builds: the nights that add one take the matrix up as well."""
    path, out = tmp_path / "history.db", tmp_path / "site"
    db = store.open_db(path)
    records = list(synthetic.story())
    days = sorted({record.build["version"] for record in records})
    nights = []
    for day, version in enumerate(days):
        cases = _counts(path)[1]
        store.save_runs(db, [record for record in records if record.build["version"] == version])
        db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        if day >= 8:
            kept = (out / resume.FOLD).is_file()
            read.clear()
            _publish(path, out)
            if kept and _counts(path)[1] == cases:  # the newest nightly brings a case: every page names it
                nights.append(_taken_up(read, path))
            _same_as_from_scratch(path, out, tmp_path / f"scratch{day}")
    assert len(nights) >= 10 and all(nights), nights


def _settled_run(path: Path) -> int:
    conn = sqlite3.connect(path)
    found = conn.execute(
        "SELECT r.id FROM runs r JOIN torch_builds b ON b.id = r.torch_build_id ORDER BY b.nightly_date, r.id LIMIT 1"
    ).fetchone()[0]
    conn.close()
    return found


CHANGES = {
    "a settled run's status": "UPDATE runs SET status = 'crash' WHERE id = {run}",
    "a settled run deleted": "; ".join(f'DELETE FROM "{table}" WHERE run_id = {{run}}' for table in store.CHILD_TABLES)
    + "; DELETE FROM runs WHERE id = {run}",
    "a finding of a settled run": "UPDATE recompiles SET key = 'Recompile:other' WHERE run_id = {run}",
    "a run added to a settled build": 'INSERT INTO runs (uid, torch_build_id, "case", case_source, backend, fullgraph, '
    "dynamic, mode, device, dtype, batch_size, prompt_length, new_tokens, model, status) SELECT 'late', "
    "torch_build_id, 'late_case', case_source, backend, 1, dynamic, mode, device, dtype, batch_size, prompt_length, "
    "new_tokens, model, 'crash' FROM runs WHERE id = {run}",
    "an older nightly backfilled": "INSERT INTO torch_builds (build_key, version, git_version, nightly_date, variant) "
    "VALUES ('old|cpu', '2.7.0.dev20240101', 'abc', '2024-01-01', 'cpu'); "
    'INSERT INTO runs (uid, torch_build_id, "case", case_source, backend, fullgraph, dynamic, mode, device, dtype, '
    "batch_size, prompt_length, new_tokens, model, status) SELECT 'backfill', last_insert_rowid(), \"case\", "
    "case_source, backend, fullgraph, dynamic, mode, device, dtype, batch_size, prompt_length, new_tokens, model, "
    "'pass' FROM runs WHERE id = {run}",
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_to_a_settled_build_is_read_again(tmp_path, read, change):
    path, out = tmp_path / "history.db", tmp_path / "site"
    _history(path, 9)
    _publish(path, out)
    at = json.loads((out / resume.FOLD).read_text())["at"]
    assert 0 < at < 9
    _add_night(path, 9)
    read.clear()
    _publish(path, out)
    assert read == [NIGHT * (10 - at)]  # the runs of the builds after the state kept
    conn = sqlite3.connect(path)
    with conn:
        conn.executescript(CHANGES[change].format(run=_settled_run(path)))
    conn.close()
    read.clear()
    _publish(path, out)
    assert read == [sqlite3.connect(path).execute("SELECT count(*) FROM runs").fetchone()[0]]
    _same_as_from_scratch(path, out, tmp_path / "scratch")


BROKEN = {
    "not JSON": lambda kept: "not JSON",
    "a build that is gone": lambda kept: kept.replace('"folded":[', '"folded":[999999,', 1),
    "a count that is text": lambda kept: kept.replace('"at":', '"at":"1",', 1).replace('"1",', '"1",' + '"x":', 1),
    "other code": lambda kept: kept.replace('"sources":"', '"sources":"0', 1),
    "a stretch on a build that is gone": lambda kept: kept.replace(
        '"episodes":[', '"episodes":[[["x"],[[999999,null,1,null,"e"]]],', 1
    ),
    "a cell's run pages not a dict": lambda kept: kept.replace('"hrefs":{', '"hrefs":[{', 1).replace('"}', '"}]', 1),
}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_kept_state_that_cannot_be_used_is_made_again(tmp_path, read, broken):
    path, out = tmp_path / "history.db", tmp_path / "site"
    _history(path, 9)
    _publish(path, out)
    (out / resume.FOLD).write_text(BROKEN[broken]((out / resume.FOLD).read_text()))
    _add_night(path, 9)
    read.clear()
    _publish(path, out)
    assert read[-1] == NIGHT * 10  # from scratch: at once, or after the state failed to load
    _same_as_from_scratch(path, out, tmp_path / "scratch")


def test_a_night_stored_while_the_report_renders_waits_for_the_next_render(tmp_path, read, monkeypatch):
    """Every query of a render sees the DB as it stood at its first: a `diag run` that stores a night
    meanwhile does not mix into it (the stamps read are those of the runs read)."""
    path, out = tmp_path / "history.db", tmp_path / "site"
    _history(path, 9)
    _publish(path, out)
    before = tmp_path / "before" / "history.db"
    before.parent.mkdir()
    before.write_bytes(path.read_bytes())
    original = store.run_builds

    def storing_meanwhile(db):
        found = original(db)
        writer = store.open_db(path)  # another connection, as a `diag run` has, between the render's queries
        store.save_runs(writer, list(synthetic.records(10 * NIGHT))[9 * NIGHT :])
        writer.conn.close()
        return found

    monkeypatch.setattr(store, "run_builds", storing_meanwhile)
    _publish(path, out)
    monkeypatch.setattr(store, "run_builds", original)
    _same_as_from_scratch(before, out, tmp_path / "scratch")
