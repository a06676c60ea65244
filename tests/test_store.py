"""Schema, migrations, transactions and unusable files, on real SQLite files."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time

import pytest
from factories import run_record

from diag import store
from diag.build import identity


def record(**run) -> store.RunRecord:
    """A run on a CUDA nightly with a graph break, a recompile and a timing."""
    return run_record(
        build=identity("2.1.0.dev20230621+cu118", "abc123", "11.8"),
        graph_breaks=[{"key": "GB0124", "reason": "r", "count": 2}],
        recompiles=[{"key": "Recompile:x", "reason": "size", "decode_step": 1}],
        timings=[{"mode": "eager", "metric": "decode_step", "unit": "s", "samples": "[0.1, 0.2]"}],
        **run,
    )


def test_blank_db_is_migrated_with_every_table_and_column(tmp_path):
    db = store.open_db(tmp_path / "a.db")
    assert {"torch_builds", "runs", "graph_breaks", "recompiles", "hidden_errors", "timings", "migrations"} <= set(
        db.table_names()
    )
    assert {
        "status",
        "error_location",
        "graph_break_count",
        "recompile_count",
        "hidden_error_count",
        "compile_s",
        "eager_ms_per_token",
        "compiled_ms_per_token",
        "tokens_equal",
        "max_abs_diff",
        "capabilities",
    } <= set(db["runs"].columns_dict)
    assert [row["name"] for row in db.query("SELECT name FROM migrations")] == [n for n, _ in store.MIGRATIONS]
    assert db["runs"].foreign_keys[0].other_table == "torch_builds"
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_reopening_applies_nothing_twice(tmp_path):
    store.open_db(tmp_path / "a.db")
    db = store.open_db(tmp_path / "a.db")
    assert db["migrations"].count == len(store.MIGRATIONS)


def test_run_and_children_round_trip(tmp_path):
    db = store.open_db(tmp_path / "a.db")
    run_id = store.save_run(db, record())
    run = store.get_run(db, run_id)
    assert run["build_nightly_date"] == "2023-06-21"
    assert run["build_variant"] == "cu118"
    assert run["graph_breaks"][0]["count"] == 2
    assert run["timings"][0]["samples"] == [0.1, 0.2]


def test_same_git_commit_is_one_build(tmp_path):
    db = store.open_db(tmp_path / "a.db")
    store.save_run(db, record(uid="a"))
    other_date = record(uid="b")
    other_date.build = identity("2.1.0.dev20230622+cu118", "abc123", "11.8")
    store.save_run(db, other_date)
    assert db["torch_builds"].count == 1


def test_a_failing_child_row_leaves_no_run(tmp_path):
    db = store.open_db(tmp_path / "a.db")
    broken = record()
    broken.hidden_errors = [{"no_such_column": 1}]
    with pytest.raises(store.StoreError, match="no_such_column"):
        store.save_run(db, broken)
    assert store.table_counts(db) == {
        "runs": 0,
        "graph_breaks": 0,
        "recompiles": 0,
        "hidden_errors": 0,
        "timings": 0,
        "frames": 0,
    }


def test_newer_schema_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "future.db"
    db = store.open_db(path)
    db.execute("INSERT INTO migrations (name, applied_at) VALUES ('m999_future', 'x')")
    db.conn.commit()
    before = path.read_bytes()
    with pytest.raises(store.StoreError, match="newer diag"):
        store.open_db(path)
    assert path.read_bytes() == before


def test_a_file_that_is_not_a_db_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "notes.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(store.StoreError, match="not a diag database"):
        store.open_db(path)
    assert path.read_bytes() == b"this is not sqlite" * 100


def test_foreign_sqlite_db_is_refused(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(store.StoreError, match="not one diag wrote"):
        store.open_db(path)


def test_processes_opening_one_new_db_at_once_migrate_it_once(tmp_path):
    # Real processes, released together, each opening the same file that does not exist yet.
    db = tmp_path / "race.db"
    go = tmp_path / "go"
    script = (
        "import os, sys, time\n"
        "from diag import store\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.001)\n"
        f"store.open_db({str(db)!r})\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True) for _ in range(8)]
    time.sleep(1.5)
    go.touch()
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, errors
    names = [row["name"] for row in store.open_db(db).query("SELECT name FROM migrations")]
    assert names == [name for name, _ in store.MIGRATIONS]


def test_reading_commands_leave_no_wal_files_beside_the_db(tmp_path):
    """The nightly workflow publishes the folder that holds history.db: a -wal or -shm that a read
    left there would be published with it (and a -wal that holds pages belongs to its DB alone)."""
    from conftest import diag

    db = store.open_db(tmp_path / "history.db")
    store.save_runs(db, [record(uid=f"u{i}") for i in range(3)])
    db.conn.close()
    assert not (tmp_path / "history.db-wal").exists()
    for command in (
        ["report", "--db", "history.db", "--out", "."],
        ["check", "--db", "history.db"],
        ["runs", "--db", "history.db"],
        ["show", "1", "--db", "history.db"],
    ):
        diag(*command, cwd=tmp_path, check=False)
        left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("history.db"))
        assert left == ["history.db"], (command, left)
    # a DB with a -wal (a writer holds it, or one died) is still opened read-only, its files untouched
    writer = sqlite3.connect(tmp_path / "history.db")
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("UPDATE runs SET status = 'crash' WHERE uid = 'u0'")
    writer.commit()
    wal = (tmp_path / "history.db-wal").read_bytes()
    done = diag("runs", "--db", "history.db", "--json", cwd=tmp_path)
    assert "crash" in done.stdout and (tmp_path / "history.db-wal").read_bytes() == wal
    writer.close()


def test_a_write_waiting_for_another_process_says_what_it_waits_for(copied_db, tmp_path):
    """Another process holds the write lock (here: this test): diag says so at once, waits, and goes on
    when the lock is released, instead of a silent minute."""
    holder = sqlite3.connect(copied_db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    said = tmp_path / "stderr.txt"
    with said.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "diag", "prune", "--db", str(copied_db), "--json"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "waiting for it" not in said.read_text():
            time.sleep(0.1)
        assert f"another process is writing {copied_db}; waiting for it (up to 60 s)" in said.read_text()
        assert process.poll() is None  # still waiting, not failed
        holder.execute("ROLLBACK")
        holder.close()
        out, _ = process.communicate(timeout=120)
    assert process.returncode == 0, said.read_text()
    assert "runs" in json.loads(out)


def test_a_graph_break_links_only_to_torchs_documentation_host(tmp_path):
    """The docs link comes from stored text: any other host, or a lookalike path, is not linked."""
    db = store.open_db(tmp_path / "links.db")
    reasons = {
        "GB0124": "see https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0124.html for more",
        "GB0001": "see https://evil.example/compile-graph-break-site/gb/gb0001.html",
        "GB0002": "see https://meta-pytorch.github.io.evil.example/compile-graph-break-site/gb/gb0002.html",
        "GB0003": "see https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0003.html.evil.example/x",
    }
    for uid, (key, reason) in enumerate(reasons.items()):
        run = record(uid=f"u{uid}")
        run.graph_breaks = [{"key": key, "reason": reason, "count": 1}]
        store.save_run(db, run)
    links = {key: found["doc_url"] for (table, key), found in store.key_texts(db).items() if table == "graph_breaks"}
    assert links == {
        "GB0124": "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0124.html",
        "GB0001": None,
        "GB0002": None,
        "GB0003": None,
    }


def test_migration_names_are_unique_and_in_order():
    """A DB records a migration as applied by its name: a name registered twice is refused, and the
    registered names are numbered in the order they run."""
    from diag.store import schema

    names = [name for name, _ in schema.MIGRATIONS]
    assert len(set(names)) == len(names) and names == sorted(names)
    with pytest.raises(ValueError, match="registered twice"):
        schema.migration(schema.MIGRATIONS[0][1])
    assert [name for name, _ in schema.MIGRATIONS] == names
