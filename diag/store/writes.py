"""Writes: a run and its child rows in one transaction, and merging one DB's runs into another."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Optional, cast

import sqlite_utils

from diag import row as rows
from diag.store.connection import StoreError, begin_writing, explain, insert, now, path_of
from diag.store.queries import environments, folded_before
from diag.store.schema import CHILD_TABLES, WHEEL_COLUMNS
from diag.store.typed import (
    FrameRow,
    GraphBreakRow,
    HiddenErrorRow,
    RaceRow,
    RecompileRow,
    RunRow,
    TimingRow,
    TorchBuildRow,
    column,
)


@dataclass
class RunRecord:
    """Everything one run produced, ready to store."""

    build: TorchBuildRow
    run: RunRow
    graph_breaks: list[GraphBreakRow]
    recompiles: list[RecompileRow]
    hidden_errors: list[HiddenErrorRow]
    timings: list[TimingRow]
    frames: list[FrameRow] = field(default_factory=list)
    # the environment it ran in (``environment_row``): stored once however many runs name it
    environment: Optional[dict[str, Any]] = None


def environment_row(
    python: Any, cuda: Any, driver: Any, packages: Optional[dict[str, str]]
) -> Optional[dict[str, Any]]:
    """An ``environments`` row with its digest; None where the distributions were not listed."""
    if not packages:
        return None
    held = {
        "python": python,
        "cuda_version": cuda,
        "driver_version": driver,
        "packages": json.dumps(packages, sort_keys=True),
    }
    digest = hashlib.sha256(json.dumps(held, sort_keys=True).encode()).hexdigest()[:20]
    return {"digest": digest, **held}


def _build_id(conn: sqlite3.Connection, build: TorchBuildRow) -> int:
    row = conn.execute("SELECT id, wheel_url FROM torch_builds WHERE build_key = ?", [build["build_key"]]).fetchone()
    if row:
        if row[1] is None and build.get("wheel_url"):
            # the first time the build's wheel is known (an earlier run used an interpreter as it was)
            conn.execute(
                "UPDATE torch_builds SET wheel_url = ?, wheel_origin = ?, wheel_sha256 = ? WHERE id = ?",
                [*(column(build, c) for c in WHEEL_COLUMNS), row[0]],
            )
        return int(row[0])
    return insert(conn, "torch_builds", {**build, "first_seen": now()})


def _text(packages: Any) -> str:
    """An environment's packages as the table holds them: JSON text (a merge reads them decoded)."""
    return packages if isinstance(packages, str) else json.dumps(packages, sort_keys=True)


def _write_run(conn: sqlite3.Connection, record: RunRecord) -> int:
    run = {**record.run, "torch_build_id": _build_id(conn, record.build)}
    if record.environment:
        row = record.environment
        conn.execute(
            "INSERT OR IGNORE INTO environments (digest, python, cuda_version, driver_version, packages) "
            "VALUES (?, ?, ?, ?, ?)",
            [row["digest"], row["python"], row["cuda_version"], row["driver_version"], _text(row["packages"])],
        )
        run["environment"] = row["digest"]
    run_id = insert(conn, "runs", run)
    for table in CHILD_TABLES:
        for row in getattr(record, table):
            insert(conn, table, {**row, "run_id": run_id})
    return run_id


def save_run(db: sqlite_utils.Database, record: RunRecord) -> int:
    """Write a run and all its child rows in one transaction; returns the run id.

    StoreError with one line (a full disk, a read-only file, ...) when it cannot: nothing is written then.
    """
    return save_runs(db, [record])[0]


@contextlib.contextmanager
def _transaction(db: sqlite_utils.Database) -> Iterator[sqlite3.Connection]:
    """One write transaction, all or none; StoreError with one line (a full disk, a read-only file,
    ...) when it cannot be made."""
    try:
        with db.conn:
            begin_writing(db.conn, path_of(db))
            yield db.conn
    except sqlite3.Error as exc:
        raise StoreError(explain(exc, path_of(db))) from exc


def save_runs(db: sqlite_utils.Database, records: Iterable[RunRecord]) -> list[int]:
    """Write many runs in one transaction (bulk loads: merges, benchmarks); all or none."""
    with _transaction(db) as conn:
        return [_write_run(conn, record) for record in records]


BUILD_COLUMNS = ("build_key", "version", "git_version", "nightly_date", "variant", "cuda_version", *WHEEL_COLUMNS)


def _builds_by_id(db: sqlite_utils.Database) -> dict[int, TorchBuildRow]:
    found = {row["id"]: {k: row[k] for k in BUILD_COLUMNS} for row in db.query("SELECT * FROM torch_builds")}
    return cast(dict[int, TorchBuildRow], found)


def save_bisect(db: sqlite_utils.Database, row: str, summary: dict[str, Any]) -> int:
    """Store one bisect's answer (``bisect.bisect``'s summary) for ``row`` (its label); its id."""
    ends = [summary["last_good"], summary["first_bad"]]
    moved = summary.get("moved") or "torch"
    last_good, first_bad = (str(end.get(moved) if moved != "torch" else end.get("version")) for end in ends)
    held = {
        "started_at": now(),
        "row": row,
        "signal": summary.get("signal") or "status",
        "moved": moved,
        "last_good": last_good,
        "first_bad": first_bad,
        "commit_range": summary.get("commit_range"),
        "reproduce": summary.get("reproduce"),
        "summary": json.dumps(summary, default=str),
    }
    with _transaction(db) as conn:
        return insert(conn, "bisects", held)


def save_races(db: sqlite_utils.Database, build: TorchBuildRow, races: list[RaceRow]) -> int:
    """Write the rows of one race (diag/verdicts/race.py, ``stored``) on ``build`` in one transaction; how many."""
    with _transaction(db) as conn:
        build_id = _build_id(conn, build)
        for race in races:
            insert(conn, "races", {**race, "torch_build_id": build_id})
    return len(races)


def _races_to_merge(target: sqlite_utils.Database, shard: sqlite_utils.Database) -> list[tuple[TorchBuildRow, dict]]:
    """(build, race row) of each race row of ``shard`` that ``target`` lacks (matched by uid and case)."""
    if "races" not in shard.table_names():
        return []
    known = {(uid, case) for uid, case in target.execute('SELECT uid, "case" FROM races')}
    builds = _builds_by_id(shard)
    found = []
    for row in shard.query("SELECT * FROM races ORDER BY id"):
        if (row["uid"], row["case"]) not in known:
            row.pop("id")
            found.append((builds[row.pop("torch_build_id")], row))
    return found


def _check_builds_named(shard: sqlite_utils.Database) -> None:
    """Every run and race of ``shard`` names a build it holds: a run without its build cannot be
    keyed, and merging the rest would pass off a part of the shard as all of it."""
    tables = ["runs"] + (["races"] if "races" in shard.table_names() else [])
    for table in tables:
        orphans = shard.execute(
            f'SELECT count(*), min(torch_build_id) FROM "{table}" '
            "WHERE torch_build_id IS NULL OR torch_build_id NOT IN (SELECT id FROM torch_builds)"
        ).fetchone()
        if orphans[0]:
            raise StoreError(
                f"{orphans[0]} {table} of the shard name a build it lacks (torch_build_id {orphans[1]}); nothing merged"
            )


def run_records(db: sqlite_utils.Database) -> Iterable[RunRecord]:
    """Every run of ``db`` as a RunRecord (ids dropped), for copying into another DB."""
    builds_by_id = _builds_by_id(db)
    ids = [row[0] for row in db.execute("SELECT id FROM runs ORDER BY id")]
    for start in range(0, len(ids), 500):
        batch = ids[start : start + 500]
        marks = ", ".join("?" for _ in batch)
        raw_runs = {row["id"]: row for row in db.query(f"SELECT * FROM runs WHERE id IN ({marks})", batch)}
        children: dict[int, dict[str, list[Any]]] = {i: {t: [] for t in CHILD_TABLES} for i in batch}
        for table in CHILD_TABLES:
            for row in db.query(f'SELECT * FROM "{table}" WHERE run_id IN ({marks}) ORDER BY id', batch):
                run_id = row.pop("run_id")
                row.pop("id")
                children[run_id][table].append(row)
        held = environments(db, {raw_runs[i].get("environment") for i in batch} - {None})
        for run_id in batch:
            run = dict(raw_runs[run_id])
            build = builds_by_id[run.pop("torch_build_id")]
            run.pop("id")
            environment = held.get(run.get("environment") or "")
            yield RunRecord(build=build, run=cast(RunRow, run), **children[run_id], environment=environment)


def merge(target: sqlite_utils.Database, shard: sqlite_utils.Database) -> tuple[int, int]:
    """Copy the runs of ``shard`` that ``target`` lacks (matched by uid), and its races (by uid and
    case), in one transaction.

    Returns (added, already present). Merging the same shard twice adds nothing.
    """
    try:
        verdict = str(shard.execute("PRAGMA quick_check").fetchone()[0])
        if verdict != "ok":
            raise StoreError(f"the shard is damaged ({verdict.splitlines()[0]}); nothing merged")
        _check_builds_named(shard)
        known = {row[0] for row in target.execute("SELECT uid FROM runs")}
        folded = folded_before(target)  # a run diag prune folded into counts is not added again

        def absent(record: RunRecord) -> bool:
            last = folded.get((record.build.get("build_key"), *(record.run.get(name) for name in rows.FIELDS)))
            return record.run["uid"] not in known and (last is None or (record.run.get("started_at") or "") > last)

        fresh = [record for record in run_records(shard) if absent(record)]
        seen = sum(1 for _ in shard.execute("SELECT 1 FROM runs")) - len(fresh)
        races = _races_to_merge(target, shard)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"the shard cannot be read ({exc}); nothing merged") from exc
    with _transaction(target) as conn:
        for record in fresh:
            _write_run(conn, record)
        for build, race in races:
            insert(conn, "races", {**race, "torch_build_id": _build_id(conn, build)})
    return len(fresh), seen
