"""diag export: every table of a real history as Parquet, partitioned by build date, read back by
DuckDB with the same rows."""

from __future__ import annotations

import json
import sqlite3

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
