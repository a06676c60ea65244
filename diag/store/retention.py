"""Retention: ``diag prune`` applies the policy (``policy.py``) to a DB: compacts old runs, folds
surplus runs into counts, and vacuums when a tenth of the file is free."""

from __future__ import annotations

import json
import sqlite3
import statistics
from typing import Any, Optional

import sqlite_utils

from diag import row as rows
from diag.build import order as build_order
from diag.row import deciding_run
from diag.stats import quantile
from diag.store import policy
from diag.store.connection import StoreError, begin_writing, explain, insert, path_of
from diag.store.queries import builds, finding_keys
from diag.store.schema import CHILD_TABLES, row_columns

PRUNED_TEXT_LINES = 20  # of a pruned run's tracebacks and stderr tail, the last lines kept

PRUNED_TEXT_CHARS = 400  # of a pruned run's finding messages, the start kept


def _summary(samples: list[float]) -> dict[str, Any]:
    return {
        "n": len(samples),
        "median": statistics.median(samples),
        "p10": quantile(samples, 0.1),
        "p90": quantile(samples, 0.9),
    }


def _tail(text: Optional[str]) -> Optional[str]:
    if not text:
        return text
    lines = text.splitlines()
    return "\n".join(lines[-PRUNED_TEXT_LINES:]) if len(lines) > PRUNED_TEXT_LINES else text


def prune(db: sqlite_utils.Database, keep_builds: int, keep_runs: int = 10, thin_after: int = 30) -> dict[str, int]:
    """``_prune``; StoreError with one line (a read-only file, a full disk) when the DB cannot take it."""
    try:
        return _prune(db, keep_builds, keep_runs, thin_after)
    except sqlite3.Error as exc:
        raise StoreError(explain(exc, path_of(db))) from exc


def _prune(db: sqlite_utils.Database, keep_builds: int, keep_runs: int, thin_after: int) -> dict[str, int]:
    """Keep a history bounded however long it lives: full detail for the newest, verdicts for the rest.

    Which run gets which treatment is ``policy.py``'s answer; this applies it.
    - Compacted: it keeps its status, error (the start of its message), counts,
      per-run medians, and each finding's key, location, count and the start of its message:
      everything a verdict or the report's matrix reads. It loses its raw timing samples (a
      summary of its decode steps stays: n, median, p10, p90), its other timing series, its
      compiled frames, its capabilities and counters, and the bulk of its tracebacks and stderr.
    - Folded into counts (``folded_runs``: build, row, status, error and finding keys, how many,
      first and last start).
    The file is vacuumed when a tenth of it is free pages. Returns how many builds were old, how
    many runs and series were compacted, how many runs were folded, and of how many (build, row)
    cells of old nightlies.
    """
    variants: policy.Variants = {}
    for build in sorted(builds(db), key=build_order):
        variants.setdefault(build["variant"], []).append(build)
    recent = policy.recent_builds(variants, keep_builds)
    thin = thinned(db, variants, thin_after)
    runs = (
        (run_id, build_id, invocation, tuple(row))
        for run_id, build_id, invocation, *row in db.execute(
            f"SELECT id, torch_build_id, invocation, {row_columns()} FROM runs ORDER BY id DESC"
        )
    )
    choice = policy.choose(runs, recent, thin, keep_runs, deciding_runs(db))
    with db.conn:
        begin_writing(db.conn, path_of(db))
        folded = _fold(db.conn, choice.surplus)
        compacted, series = _compact(db, choice.kept)
    pages, free = (db.execute(f"PRAGMA {name}").fetchone()[0] for name in ("page_count", "freelist_count"))
    if free * 10 > pages:
        db.execute("VACUUM")  # cleared columns and folded runs leave pages empty, which only a rewrite returns
    return {
        "builds": sum(len(same) for same in variants.values()) - len(recent),
        "runs": compacted,
        "series": series,
        "folded": folded,
        "thinned": len(choice.thinned),
    }


def _compact(db: sqlite_utils.Database, kept: set[int]) -> tuple[int, int]:
    """Every run not ``kept`` in full, compacted to what verdicts read (``_prune``), inside the caller's
    transaction; how many runs, and how many timing series were summarised."""
    db.execute("CREATE TEMP TABLE IF NOT EXISTS pruned (id INTEGER PRIMARY KEY)")
    db.execute("DELETE FROM pruned")
    db.conn.executemany(
        "INSERT INTO pruned (id) SELECT id FROM runs WHERE id = ? AND capabilities IS NOT NULL",
        [(i,) for i in set(r[0] for r in db.execute("SELECT id FROM runs")) - kept],
    )
    compacted = db.execute("SELECT count(*) FROM pruned").fetchone()[0]
    series = 0
    # of a compacted run's timings, the decode steps' summary stays (its medians are run columns)
    db.execute("DELETE FROM timings WHERE run_id IN (SELECT id FROM pruned) AND metric != 'decode_step'")
    raw = db.execute(
        "SELECT id, samples FROM timings WHERE run_id IN (SELECT id FROM pruned) AND samples IS NOT NULL"
    ).fetchall()
    for timing_id, samples in raw:
        values = json.loads(samples)
        summary = json.dumps(_summary(values)) if values else None
        db.execute("UPDATE timings SET samples = NULL, summary = ? WHERE id = ?", [summary, timing_id])
        series += 1
    for run_id, tb, stderr in db.execute(
        "SELECT id, traceback, stderr_tail FROM runs WHERE id IN (SELECT id FROM pruned)"
    ).fetchall():
        # per-run detail a verdict never reads: what each collector could do, dynamo's raw counters
        db.execute(
            "UPDATE runs SET traceback = ?, stderr_tail = ?, capabilities = NULL, counters = NULL, "
            f"error_message = substr(error_message, 1, {PRUNED_TEXT_CHARS}) WHERE id = ?",
            [_tail(tb), _tail(stderr), run_id],
        )
    of_pruned = "run_id IN (SELECT id FROM pruned)"
    db.execute(f"DELETE FROM frames WHERE {of_pruned}")
    # findings keep their key, location and count, and the start of what torch said
    db.execute(
        f"UPDATE hidden_errors SET traceback = NULL, message = substr(message, 1, {PRUNED_TEXT_CHARS}) "
        f"WHERE {of_pruned}"
    )
    for table in ("graph_breaks", "recompiles"):
        db.execute(
            f"UPDATE {table} SET reason = substr(reason, 1, {PRUNED_TEXT_CHARS}) WHERE {of_pruned} "
            f"AND length(reason) > {PRUNED_TEXT_CHARS}"
        )
    return compacted, series


def deciding_runs(db: sqlite_utils.Database) -> frozenset[int]:
    """Of each cell (a row on one build), the run that decides each of its statuses, as check and the
    report choose it: the cell keeps its deciding run, its statuses and so whether it is flaky."""
    by_status: dict[tuple, list[dict[str, Any]]] = {}
    for run in db.query(f"SELECT id, torch_build_id, status, started_at, uid, {row_columns()} FROM runs"):
        by_status.setdefault((run["torch_build_id"], rows.of(run), run["status"]), []).append(run)
    return frozenset(deciding_run(runs)["id"] for runs in by_status.values())


def thinned(db: sqlite_utils.Database, variants: policy.Variants, thin_after: int) -> set[tuple]:
    """(build id, *row) of old nightlies whose runs fold into counts (``policy.thin_cells``), read from ``db``."""
    old = policy.old_nightlies(variants, thin_after)
    if not old:
        return set()
    columns = row_columns()
    keys = _finding_keys_text(db.conn)
    outcomes: dict[tuple, dict[int, set]] = {}
    timed: set[tuple] = set()
    for run_id, build_id, *row, status, key, median in db.execute(
        f"SELECT id, torch_build_id, {columns}, status, error_key, compiled_ms_per_token FROM runs"
    ):
        outcomes.setdefault(tuple(row), {}).setdefault(build_id, set()).add((status, key, keys.get(run_id, "")))
        if median is not None:
            timed.add(tuple(row))
    for build_id, *row, status, key, found in db.execute(
        f"SELECT torch_build_id, {columns}, status, error_key, finding_keys FROM folded_runs"
    ):
        outcomes.setdefault(tuple(row), {}).setdefault(build_id, set()).add((status, key, found or ""))
    return policy.thin_cells(variants, old, outcomes, timed)


def _finding_keys_text(conn: sqlite3.Connection, where: str = "") -> dict[int, str]:
    """Per run id, its finding keys as one text (``table:key`` sorted, ``;``-joined)."""
    return {
        run_id: ";".join(sorted(f"{table}:{key}" for table, key in pairs))
        for run_id, pairs in finding_keys(conn, where).items()
    }


def _fold(conn: sqlite3.Connection, run_ids: list[int]) -> int:
    """Delete ``run_ids`` with their child rows, each counted in folded_runs by build, row and outcome."""
    if not run_ids:
        return 0
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS folding (id INTEGER PRIMARY KEY)")
    conn.execute("DELETE FROM folding")
    conn.executemany("INSERT INTO folding (id) VALUES (?)", [(i,) for i in run_ids])
    keys = _finding_keys_text(conn, "WHERE run_id IN (SELECT id FROM folding)")
    groups: dict[tuple, list] = {}  # (build, *row, status, error key, finding keys) -> [runs, start times]
    for run_id, *outcome, started in conn.execute(
        f"SELECT id, torch_build_id, {row_columns()}, status, error_key, started_at FROM runs "
        "WHERE id IN (SELECT id FROM folding)"
    ).fetchall():
        group = groups.setdefault((*outcome, keys.get(run_id)), [0, []])
        group[0] += 1
        if started:
            group[1].append(started)
    names = ["torch_build_id", *rows.FIELDS, "status", "error_key", "finding_keys"]
    same = " AND ".join(f'"{name}" IS ?' for name in names)
    for key, (count, starts) in groups.items():
        first, last = (min(starts), max(starts)) if starts else (None, None)
        known = conn.execute(
            f"SELECT id, runs, first_started_at, last_started_at FROM folded_runs WHERE {same}", key
        ).fetchone()
        if known:
            folded_id, runs, was_first, was_last = known
            conn.execute(
                "UPDATE folded_runs SET runs = ?, first_started_at = ?, last_started_at = ? WHERE id = ?",
                [
                    runs + count,
                    min(filter(None, (first, was_first)), default=None),
                    max(filter(None, (last, was_last)), default=None),
                    folded_id,
                ],
            )
        else:
            insert(
                conn,
                "folded_runs",
                {**dict(zip(names, key)), "runs": count, "first_started_at": first, "last_started_at": last},
            )
    for table in CHILD_TABLES:
        conn.execute(f'DELETE FROM "{table}" WHERE run_id IN (SELECT id FROM folding)')
    conn.execute("DELETE FROM runs WHERE id IN (SELECT id FROM folding)")
    return len(run_ids)
