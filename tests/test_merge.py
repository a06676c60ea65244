"""Shard databases from separate CI legs merge without duplicating runs."""

from __future__ import annotations

import json

from conftest import diag

from diag import store


def test_merging_the_same_shard_twice_keeps_each_run_once(findings_db, tmp_path):
    handle = store.open_db(findings_db)
    handle.conn.execute("PRAGMA wal_checkpoint(FULL)")
    shard_runs = handle["runs"].count
    out = tmp_path / "history.db"
    first = json.loads(diag("merge", str(out), str(findings_db), "--json", cwd=tmp_path).stdout)
    second = json.loads(diag("merge", str(out), str(findings_db), str(findings_db), "--json", cwd=tmp_path).stdout)
    assert first == [{"shard": str(findings_db), "added": shard_runs, "already_present": 0}]
    assert [s["added"] for s in second] == [0, 0]
    merged = store.open_db(out)
    assert merged["runs"].count == shard_runs
    assert merged["torch_builds"].count == handle["torch_builds"].count
    for table in ("graph_breaks", "recompiles", "hidden_errors", "timings"):
        assert merged[table].count == handle[table].count, table
    original = {r["uid"]: r for r in handle.query("SELECT uid, status, graph_break_count FROM runs")}
    copied = {r["uid"]: r for r in merged.query("SELECT uid, status, graph_break_count FROM runs")}
    assert copied == original
    assert store.integrity(merged) == "ok"


def test_merge_of_a_missing_shard_writes_nothing(tmp_path):
    done = diag("merge", str(tmp_path / "out.db"), str(tmp_path / "missing.db"), cwd=tmp_path, check=False)
    assert done.returncode != 0 and "no database at" in done.stderr
    assert not (tmp_path / "out.db").exists()
