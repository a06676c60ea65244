"""diag export: every table of a real history as Parquet, partitioned by build date, read back by
DuckDB with the same rows."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import duckdb
import pytest
from conftest import diag_here

from diag import export


def _export(db, out, cwd) -> dict:
    done = diag_here("export", "--db", str(db), "--out", str(out), "--json", cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_table_reads_back_in_duckdb_with_the_same_rows(recorded_db, tmp_path):
    out = tmp_path / "export"
    written = _export(recorded_db, out, tmp_path)["rows"]
    conn = sqlite3.connect(recorded_db)
    for table in export.TABLES:
        (count,) = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        assert written[table] == count, table
        if count:
            files = f"{out}/{table}/**/*.parquet"
            read = duckdb.sql(f"SELECT count(*) FROM read_parquet('{files}', hive_partitioning=true)").fetchall()
            assert read == [(count,)], table
    # a run's findings carry its build: the nightly's graph breaks are under its nightly date
    dates = {path.name for path in (out / "runs").iterdir()}
    nightly = conn.execute("SELECT nightly_date FROM torch_builds WHERE nightly_date IS NOT NULL").fetchone()[0]
    assert f"build_date={nightly}" in dates and len(dates) == 2
    joined = duckdb.sql(
        f"""SELECT r.build_date = g.build_date AS same, count(*) FROM
            read_parquet('{out}/graph_breaks/**/*.parquet', hive_partitioning=true) g
            JOIN read_parquet('{out}/runs/**/*.parquet', hive_partitioning=true) r ON g.run_id = r.id GROUP BY 1"""
    ).fetchall()
    assert joined and all(same for same, _ in joined)
    # columns keep their types: counts are integers, latencies floats
    described = duckdb.sql(f"DESCRIBE SELECT * FROM read_parquet('{out}/runs/**/*.parquet')").fetchall()
    types = {name: kind for name, kind, *_ in described}
    assert types["graph_break_count"] == "BIGINT" and types["compiled_ms_per_token"] == "DOUBLE"


def test_a_second_export_replaces_the_first(recorded_db, tmp_path):
    out = tmp_path / "export"
    first = _export(recorded_db, out, tmp_path)["rows"]
    again = _export(recorded_db, out, tmp_path)["rows"]
    assert first == again
    read = duckdb.sql(f"SELECT count(*) FROM read_parquet('{out}/runs/**/*.parquet')").fetchall()
    assert read == [(first["runs"],)]


@pytest.mark.parametrize("where", ["file", "foreign"])
def test_an_out_that_is_not_an_export_is_refused_in_one_line(recorded_db, tmp_path, where):
    out = tmp_path / "out"
    if where == "file":
        out.write_text("mine")
    else:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    done = diag_here("export", "--db", str(recorded_db), "--out", str(out), cwd=tmp_path)
    assert done.returncode == (2 if where == "file" else 1) and done.stderr.count("\n") == 1
    assert ("is a file" if where == "file" else "holds notes.txt, not an earlier export") in done.stderr
    assert (out.read_text() if where == "file" else (out / "notes.txt").read_text()) == "mine"


def test_a_missing_history_is_one_line(tmp_path):
    done = diag_here("export", "--db", "nope.db", "--out", "x", cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and not (tmp_path / "x").exists()


def test_a_users_files_in_folders_named_like_tables_are_never_removed(recorded_db, tmp_path):
    """exp/runs/notes.txt and exp/timings/mine.csv are the user's: the export is refused, they stay."""
    out = tmp_path / "exp"
    for name, text in (("runs/notes.txt", "notes"), ("timings/mine.csv", "a,b")):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    done = diag_here("export", "--db", str(recorded_db), "--out", str(out), cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "runs/notes.txt" in done.stderr and "timings/mine.csv" in done.stderr
    assert (out / "runs" / "notes.txt").read_text() == "notes" and (out / "timings" / "mine.csv").read_text() == "a,b"
    # nor after an export of diag's own: a file put into it later is the user's
    _export(recorded_db, tmp_path / "mine", tmp_path)
    (tmp_path / "mine" / "runs" / "notes.txt").write_text("notes")
    done = diag_here("export", "--db", str(recorded_db), "--out", str(tmp_path / "mine"), cwd=tmp_path)
    assert done.returncode == 1 and "runs/notes.txt" in done.stderr and "did not write" in done.stderr
    assert (tmp_path / "mine" / "runs" / "notes.txt").read_text() == "notes"


def test_an_export_written_before_the_marker_is_replaced(recorded_db, tmp_path):
    out = tmp_path / "old"
    first = _export(recorded_db, out, tmp_path)["rows"]
    (out / export.MARKER).unlink()
    assert _export(recorded_db, out, tmp_path)["rows"] == first
    assert json.loads((out / export.MARKER).read_text())["rows"] == first


def _whole(out) -> dict:
    """The export at ``out`` as its marker describes it, checked whole: every file it lists is there and
    nothing else, and DuckDB reads as many runs as it says it wrote."""
    marker = json.loads((out / export.MARKER).read_text())
    found = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name != export.MARKER)
    assert found == marker["files"]
    read = duckdb.sql(f"SELECT count(*) FROM read_parquet('{out}/runs/**/*.parquet')").fetchall()
    assert read == [(marker["rows"]["runs"],)]
    return marker


def _wait_until_catching(pid: int, signum: int) -> None:
    """Until the process ``pid`` has a handler for ``signum`` (its SigCgt mask in /proc)."""
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        fields = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        if int(fields["SigCgt"], 16) >> (signum - 1) & 1:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} never caught signal {signum}")


@pytest.mark.slow
def test_a_stopped_export_leaves_the_earlier_one_whole(tmp_path):
    """SIGTERM at moments spread over a second export of a grown history: the folder holds the earlier
    export or the new one, each whole, never a mix; no hidden folder is left beside it."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time

    from conftest import REPO

    sys.path.insert(0, str(REPO / "bench"))
    import synthetic

    kept, work = tmp_path / "kept", tmp_path / "work"
    kept.mkdir()
    work.mkdir()
    made = synthetic.write_history(kept / "h.db", 3000)
    first = _export(kept / "h.db", kept / "exp", kept)["rows"]
    synthetic.add_nightly(kept / "h.db", made)
    grown = made + len(synthetic.configs())
    outcomes = []
    for delay in (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 3.0):
        shutil.rmtree(work)
        shutil.copytree(kept, work)  # the grown history, and the earlier export at exp
        process = subprocess.Popen(
            [sys.executable, "-m", "diag", "export", "--db", "h.db", "--out", "exp"],
            cwd=work,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        _wait_until_catching(process.pid, signal.SIGTERM)  # before it, Python's own default ends it
        started = time.monotonic()
        time.sleep(delay)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
        runs = _whole(work / "exp")["rows"]["runs"]
        outcomes.append((round(time.monotonic() - started, 1), process.returncode, runs))
        assert runs in (first["runs"], grown), outcomes
        # a signal that lands once the export is whole, as the process exits (main() has let the stop
        # signals go: diag/cli/__init__.py), ends it by the default action, -15: nothing is left half-made
        ended = process.returncode in (0, 143) or (process.returncode == -signal.SIGTERM and runs == grown)
        assert ended and b"Traceback" not in err, (outcomes, err)
        assert sorted(os.listdir(work)) == ["exp", "h.db"], os.listdir(work)
    # the signal landed before the swap in some trials and after it in others
    assert {runs for _, _, runs in outcomes} == {first["runs"], grown}, outcomes


def test_a_stop_while_the_earlier_export_is_removed_leaves_no_hidden_folder(tmp_path, monkeypatch):
    """The stop lands after the swap, while the earlier export is being removed: the new export is in
    place, the earlier one is gone all the same, and the stop goes on."""
    import os
    import shutil

    from diag import stopping

    out, stage = tmp_path / "exp", tmp_path / "stage"
    (out / "runs").mkdir(parents=True)
    (out / "runs" / "old.parquet").write_text("old")
    (stage / "runs").mkdir(parents=True)
    (stage / "runs" / "new.parquet").write_text("new")
    real = shutil.rmtree
    stops = []

    def stopped_once(path, *args, **kwargs):
        if not stops:
            stops.append(path)
            raise stopping.Stopped(15)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", stopped_once)
    with pytest.raises(stopping.Stopped):
        export._replace(stage, out)
    assert stops and sorted(os.listdir(tmp_path)) == ["exp"]
    assert os.listdir(out / "runs") == ["new.parquet"]


@pytest.mark.parametrize("name", ["x%41.db", "q?mode=rw.db", "a#b.db"], ids=["percent", "question", "hash"])
def test_a_db_name_with_uri_characters_is_a_path(copied_db, tmp_path, name):
    """The name is the file's, never read as an SQLite URI: x%41.db is not xA.db (an empty xA.db beside
    it gave 0 rows), and a ? or # makes no stray file."""
    db = tmp_path / name
    copied_db.rename(db)
    (tmp_path / "xA.db").touch()

    def entries() -> list[str]:  # SQLite's own files beside the DB aside
        return sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm")))

    before = entries()
    done = diag_here("export", "--db", name, "--out", "ex", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"]["runs"] == 30
    assert entries() == sorted([*before, "ex"])
