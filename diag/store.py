"""The SQLite store: schema, migrations, and every read and write (the only module with SQL).

sqlite-utils creates tables and indexes; a run and its child rows are written
with plain statements inside one ``with conn:`` transaction, because
sqlite-utils' own insert commits on its own and would split the transaction.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import statistics
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import sqlite_utils

from diag.build import order as build_order
from diag import row as rows
from diag.probe.statuses import FINDING_TABLES


class StoreError(Exception):
    """A database diag cannot use: not SQLite, written by a newer diag, or not writable."""



Migration = Callable[[sqlite_utils.Database], None]
MIGRATIONS: list[tuple[str, Migration]] = []


def migration(fn: Migration) -> Migration:
    MIGRATIONS.append((fn.__name__, fn))
    return fn


@migration
def m001_initial(db: sqlite_utils.Database) -> None:
    db["migrations"].create({"name": str, "applied_at": str}, pk="name")
    db["torch_builds"].create({
        "id": int, "build_key": str, "version": str, "git_version": str, "nightly_date": str,
        "variant": str, "cuda_version": str, "first_seen": str,
    }, pk="id")
    db["torch_builds"].create_index(["build_key"], unique=True)
    db["runs"].create({
        "id": int, "uid": str, "torch_build_id": int, "case": str, "config": str,
        "backend": str, "fullgraph": int, "dynamic": str, "mode": str, "device": str, "dtype": str,
        "batch_size": int, "prompt_length": int, "new_tokens": int, "model": str,
        "status": str, "error_type": str, "error_message": str, "error_location": str, "traceback": str,
        "graph_count": int, "graph_break_count": int, "recompile_count": int, "hidden_error_count": int,
        "compile_s": float, "eager_ms_per_token": float, "compiled_ms_per_token": float,
        "peak_mem_eager_mb": float, "peak_mem_compiled_mb": float, "memory_kind": str,
        "tokens_equal": int, "max_abs_diff": float, "first_differing_step": int, "eager_margin": float,
        "oracle_equal": int, "capabilities": str, "counters": str, "timing_error": str,
        "torch_version": str, "transformers_version": str, "depyf_version": str, "python": str,
        "platform": str, "device_name": str, "host": str, "started_at": str, "duration_s": float,
        "tool_version": str, "artifacts_dir": str, "exit_code": int, "signal": int, "stderr_tail": str,
    }, pk="id", foreign_keys=[("torch_build_id", "torch_builds", "id")])
    db["runs"].create_index(["uid"], unique=True)
    db["runs"].create_index(["torch_build_id", "case"])
    db["graph_breaks"].create({
        "id": int, "run_id": int, "key": str, "reason": str, "gb_type": str, "user_file": str,
        "user_line": int, "resumable": int, "decode_step": int, "count": int,
    }, pk="id", foreign_keys=[("run_id", "runs", "id")])
    db["recompiles"].create({
        "id": int, "run_id": int, "key": str, "reason": str, "function": str, "frame": str,
        "decode_step": int, "guard_failures": int,
    }, pk="id", foreign_keys=[("run_id", "runs", "id")])
    db["hidden_errors"].create({
        "id": int, "run_id": int, "key": str, "source": str, "exc_type": str, "message": str,
        "logger": str, "frame": str, "traceback": str, "decode_step": int, "count": int,
    }, pk="id", foreign_keys=[("run_id", "runs", "id")])
    db["timings"].create({
        "id": int, "run_id": int, "pass": str, "metric": str, "unit": str, "samples": str,
    }, pk="id", foreign_keys=[("run_id", "runs", "id")])
    for table in ("graph_breaks", "recompiles", "hidden_errors", "timings"):
        db[table].create_index(["run_id"])


CHILD_TABLES = (*FINDING_TABLES, "timings", "frames")


@migration
def m002_views(db: sqlite_utils.Database) -> None:
    """Views for browsing the DB in Datasette or sqlite3."""
    db.create_view("run_summary", """
        SELECT runs.id, b.version AS torch_version, b.nightly_date, b.git_version, runs."case", runs.backend,
               runs.fullgraph, runs.dynamic, runs.mode, runs.device, runs.dtype, runs.batch_size,
               runs.prompt_length, runs.status, runs.error_type, runs.graph_break_count, runs.recompile_count,
               runs.hidden_error_count, runs.compile_s, runs.eager_ms_per_token, runs.compiled_ms_per_token,
               runs.started_at
        FROM runs JOIN torch_builds b ON b.id = runs.torch_build_id""")
    db.create_view("latest_status", """
        SELECT s.* FROM run_summary s
        WHERE s.id = (SELECT MAX(r.id) FROM runs r JOIN torch_builds rb ON rb.id = r.torch_build_id
                      WHERE rb.version = s.torch_version AND r."case" = s."case" AND r.backend = s.backend
                        AND r.fullgraph = s.fullgraph AND r.dynamic = s.dynamic AND r.mode = s.mode
                        AND r.device = s.device AND r.dtype = s.dtype)""")


@migration
def m003_error_key_case_path(db: sqlite_utils.Database) -> None:
    """The stable key of a run's own exception (check and compare name it across builds), and the
    case file a run used (repro rebuilds from it)."""
    db["runs"].add_column("error_key", str)
    db["runs"].add_column("case_path", str)


@migration
def m004_frames_and_warm_compile(db: sqlite_utils.Database) -> None:
    """Per compiled frame: torch's compilation_metrics (torch >= 2.4); and compile time with warm caches."""
    db["frames"].create({
        "id": int, "run_id": int, "compile_id": str, "co_name": str, "co_filename": str, "co_firstlineno": int,
        "cache_size": int, "accumulated_cache_size": int, "guard_count": int, "shape_env_guard_count": int,
        "graph_op_count": int, "graph_node_count": int, "graph_input_count": int,
        "entire_frame_compile_time_s": float, "backend_compile_time_s": float, "inductor_compile_time_s": float,
        "code_gen_time_s": float, "fail_type": str, "fail_reason": str, "restart_reasons": str,
    }, pk="id", foreign_keys=[("run_id", "runs", "id")])
    db["frames"].create_index(["run_id"])
    db["runs"].add_column("compile_warm_s", float)


@migration
def m005_invocation(db: sqlite_utils.Database) -> None:
    """Which ``diag run`` made a run: ``diag check`` on one build pools the newest invocation's runs
    of a row against the invocation's before it (NULL on older runs: each run stands alone)."""
    db["runs"].add_column("invocation", str)


@migration
def m006_one_vocabulary(db: sqlite_utils.Database) -> None:
    """One word per concept. A timing's eager/compiled column is ``mode`` (a probe's processes are its
    passes); a user-code ``file:line`` is ``location`` in every table; a run records where its case
    came from (``case_source``: builtin, or the case file's path), which is part of the row; fields a
    newer probe wrote that this schema has no column for are kept as JSON in ``extra``."""
    conn = db.conn
    conn.execute('ALTER TABLE timings RENAME COLUMN "pass" TO mode')
    for table in ("recompiles", "hidden_errors"):
        conn.execute(f"ALTER TABLE {table} RENAME COLUMN frame TO location")
    conn.execute("ALTER TABLE graph_breaks ADD COLUMN location TEXT")
    conn.execute("UPDATE graph_breaks SET location = CASE WHEN user_line IS NULL THEN user_file "
                 "ELSE user_file || ':' || user_line END")
    for column in ("user_file", "user_line"):
        conn.execute(f"ALTER TABLE graph_breaks DROP COLUMN {column}")
    conn.execute("ALTER TABLE runs ADD COLUMN case_source TEXT")
    builtin = ", ".join(f"'{name}'" for name in ("append_last", "dynamic_slice", "hf_static_cache", "hf_dynamic_cache"))
    conn.execute(f"""UPDATE runs SET case_source = CASE
        WHEN "case" IN ({builtin}) AND (case_path IS NULL OR case_path LIKE '%/cases/' || "case" || '.py')
        THEN '{rows.BUILTIN}' ELSE COALESCE(case_path, 'unknown') END""")
    for table in ("runs", *FINDING_TABLES):
        conn.execute(f"ALTER TABLE {table} ADD COLUMN extra TEXT")
    conn.execute(f"CREATE INDEX runs_row ON runs (torch_build_id, {_row_columns()})")


@migration
def m007_ops_captured(db: sqlite_utils.Database) -> None:
    """How many torch calls dynamo put into graphs (its calls_captured counter): a graph that shrinks
    between builds, more of the step left to eager, shows here even where the status holds."""
    db["runs"].add_column("ops_captured", int)


@migration
def m008_wheel_source(db: sqlite_utils.Database) -> None:
    """Where each build's torch wheel came from (a URL or a file) and its sha256, so that any build
    diag ran can be installed again and checked (diag env add --like BUILD)."""
    for column in ("wheel_url", "wheel_origin", "wheel_sha256"):
        db["torch_builds"].add_column(column, str)


WHEEL_COLUMNS = ("wheel_url", "wheel_origin", "wheel_sha256")


@migration
def m009_timing_summaries(db: sqlite_utils.Database) -> None:
    """A timing series of an old build kept as its summary (n, median, p10, p90) once its raw
    samples are pruned (diag prune): the history stays bounded."""
    db["timings"].add_column("summary", str)


@migration
def m010_folded_runs(db: sqlite_utils.Database) -> None:
    """Runs ``diag prune`` folded into counts: of one build, a row's runs beyond its newest (a release
    leg re-runs its build every night), and a row's runs on an old nightly where the row does not
    change. One row per build, row and outcome (status, error key and finding keys): how many runs,
    when the first and the last of them started."""
    whole = {"fullgraph", "batch_size", "prompt_length", "new_tokens"}
    db["folded_runs"].create({
        "id": int, "torch_build_id": int, **{name: int if name in whole else str for name in rows.FIELDS},
        "status": str, "error_key": str, "finding_keys": str, "runs": int, "first_started_at": str,
        "last_started_at": str,
    }, pk="id", foreign_keys=[("torch_build_id", "torch_builds", "id")])
    db["folded_runs"].create_index(["torch_build_id"])


def _row_columns(prefix: str = "") -> str:
    return ", ".join(f'{prefix}"{name}"' for name in rows.FIELDS)


def _create_views(conn: sqlite3.Connection) -> None:
    """The Datasette views, over the current schema and the one row definition (re-made after migrating).

    ``latest_status`` is the newest run of each row on each build, by the runs_row index.
    """
    for view in ("latest_status", "run_summary"):
        conn.execute(f"DROP VIEW IF EXISTS {view}")
    conn.execute(f"""CREATE VIEW run_summary AS
        SELECT runs.id, b.version AS torch_version, b.nightly_date, b.git_version, b.variant,
               {_row_columns('runs.')}, runs.status, runs.error_type, runs.error_message, runs.graph_break_count,
               runs.recompile_count, runs.hidden_error_count, runs.compile_s, runs.eager_ms_per_token,
               runs.compiled_ms_per_token, runs.transformers_version, runs.python, runs.started_at
        FROM runs JOIN torch_builds b ON b.id = runs.torch_build_id""")
    conn.execute(f"""CREATE VIEW latest_status AS
        SELECT s.* FROM run_summary s
        JOIN (SELECT MAX(id) AS id FROM runs GROUP BY torch_build_id, {_row_columns()}) newest ON newest.id = s.id""")


DESCRIPTIONS: dict[str, tuple[str, dict[str, str]]] = {
    "torch_builds": ("One torch build: version, git commit and variant; the wheel it came from when diag installed it.", {
        "build_key": "commit (or version when unknown) | variant: two dated nightlies of one commit are one build",
        "version": "torch.__version__", "git_version": "torch.version.git_version",
        "nightly_date": "the date in a nightly's version (YYYY-MM-DD)", "variant": "cpu, cu126, ...",
        "wheel_url": "where the installed wheel came from", "wheel_sha256": "the installed wheel's sha256"}),
    "runs": ("One `diag run` of one case on one build: the row's fields, status, counts, timings and environment.", {
        "case": "case name", "case_source": "builtin, or the path of the user's case file",
        "fullgraph": "1: torch.compile(fullgraph=True)", "status": "the run's one status (see `diag statuses`)",
        "error_type": "the compile's exception type, when it failed", "error_key": "stable key of that exception",
        "graph_break_count": "graph breaks, each counted as often as it happened (NULL: nothing was compiled)",
        "recompile_count": "recompiles dynamo logged", "hidden_error_count": "exceptions torch swallowed or logged",
        "compile_s": "compile time, cold caches (s)", "compile_warm_s": "compile time, warm caches (s)",
        "eager_ms_per_token": "median eager decode step (ms)", "compiled_ms_per_token": "median compiled decode step (ms)",
        "invocation": "the `diag run` that made this run (repeats share it)",
        "transformers_version": "transformers in the run's environment", "python": "the run's Python"}),
    "graph_breaks": ("Graph breaks per run, one row per distinct break (key) with how often it happened.", {
        "key": "stable across builds: gb_type or the normalised reason", "gb_type": "torch's graph-break type (2.8+)",
        "resumable": "1: dynamo resumed after the break"}),
    "recompiles": ("Recompiles per run, with the guard that failed.", {
        "reason": "the failed guard", "decode_step": "the decode step that triggered it",
        "guard_failures": "guards that failed on it"}),
    "hidden_errors": ("Exceptions torch caught or logged while compiling: visible only in DEBUG logs.", {
        "source": "where it was caught: log, exception hook, timing_pass, recompile_limit, ...",
        "logger": "the logger that reported it"}),
    "timings": ("Timing series per run: raw samples for recent builds, a summary after `diag prune`.", {
        "samples": "JSON list of samples (NULL once pruned)", "summary": "JSON n, median, p10, p90 of pruned samples"}),
    "frames": ("Per compiled frame, torch's compilation_metrics (torch 2.4+).", {}),
    "folded_runs": ("Runs `diag prune` folded into counts, by build, row and outcome: a row's runs of one build "
                    "beyond its newest, and a row's runs on old nightlies where it does not change.", {
        "runs": "how many runs were folded", "first_started_at": "when the first of them started",
        "last_started_at": "when the last of them started"}),
    "run_summary": ("Every run with its build's version: the table to filter and facet.", {}),
    "latest_status": ("The newest run of each row on each build: the report's matrix as a table.", {}),
}


def datasette_metadata(db: sqlite_utils.Database, name: Optional[str] = None) -> dict[str, Any]:
    """Datasette metadata for ``db``: table and column descriptions, builds labelled by version.
    Datasette names a database after its file's stem: ``name``, or the stem of ``db``'s file."""
    path = next((row[2] for row in db.execute("PRAGMA database_list") if row[1] == "main"), "") or "history.db"
    tables = {}
    for table, (description, columns) in DESCRIPTIONS.items():
        tables[table] = {"description": description, "columns": columns}
    tables["torch_builds"]["label_column"] = "version"
    tables["runs"]["label_column"] = "case"
    return {"title": "diag: torch.compile diagnostics across torch builds",
            "description": "Open with `datasette DB -m datasette.json` (the file the report writes).",
            "databases": {name or Path(path).stem: {"tables": tables}}}


def explain(exc: sqlite3.Error, path: Path) -> str:
    """One line that says what is wrong with the DB at ``path``, from SQLite's own error."""
    message = str(exc)
    lowered = message.lower()
    if "not a database" in lowered or "file is encrypted" in lowered:
        return f"{path} is not a diag database ({message})"
    if "malformed" in lowered or "corrupt" in lowered:
        return f"{path} is damaged ({message}); restore it from a copy"
    if "readonly" in lowered or "read-only" in lowered:
        return f"{path} is read-only: diag can read it but not add runs to it ({message})"
    if "disk is full" in lowered or "no space" in lowered:
        return f"the disk holding {path} is full ({message})"
    if "unable to open" in lowered:
        return f"cannot open {path}: is its folder readable and writable? ({message})"
    return f"{path}: {message}"


def open_db(path: str | Path, create: bool = True, readonly: bool = False) -> sqlite_utils.Database:
    """Open (and migrate) the DB at ``path``; StoreError with a one-line reason when unusable.

    ``readonly`` opens without ever writing to the file: a DB of an older schema is then migrated
    in a copy held in memory, so that inputs (merge's shards, a read-only history) stay untouched.
    A DB this call created and could not set up is removed again.
    """
    path = Path(path)
    existed = path.exists()
    if not existed and not create:
        raise StoreError(f"no database at {path}")
    if existed and path.is_dir():
        raise StoreError(f"{path} is a directory, not a database")
    try:
        return _open(path, readonly and existed)
    except sqlite3.Error as exc:
        if not existed:
            _remove_db_files(path)
        raise StoreError(explain(exc, path)) from exc
    except StoreError:
        if not existed:
            _remove_db_files(path)
        raise


def _open(path: Path, readonly: bool) -> sqlite_utils.Database:
    if readonly and not Path(f"{path}-wal").exists() and os.access(path, os.W_OK) and os.access(path.parent, os.W_OK):
        # A read-only connection to a WAL database leaves the -wal and -shm files it opened behind
        # (a published site would carry them). With no -wal there is nothing to checkpoint, so a
        # read-write connection that refuses writes reads the same and removes them when it closes.
        conn = sqlite3.connect(str(path), timeout=60)
        conn.execute("PRAGMA query_only = ON")
    elif readonly:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=60)
    else:
        conn = sqlite3.connect(str(path), timeout=60)
    conn.execute("PRAGMA busy_timeout = 60000")
    tables = _tables(conn)
    db = sqlite_utils.Database(conn)
    _check_known(db, tables, path)
    if any(name not in _applied(db, tables) for name, _ in MIGRATIONS):
        if readonly:
            memory = sqlite3.connect(":memory:")
            conn.backup(memory)
            conn.close()
            conn, db = memory, sqlite_utils.Database(memory)
        _migrate(conn, db, path)
    conn.execute("PRAGMA foreign_keys = ON")
    # Text that is not UTF-8 (a probe's raw output, a hand-edited DB) reads with its bad bytes
    # escaped: every command that reads the DB goes on, and no raw control bytes reach a terminal.
    conn.text_factory = _decode_text
    return db


def _decode_text(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")


def _remove_db_files(path: Path) -> None:
    """Remove a DB file this process created and could not set up: only while it is still empty,
    since a process racing to create the same DB may have filled it meanwhile."""
    try:
        if path.stat().st_size > 0:
            return
    except OSError:
        return
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(f"{path}{suffix}")
        except OSError:
            pass


def check_writable(path: str | Path) -> None:
    """StoreError unless runs can be added to the existing DB at ``path``: a write, rolled back."""
    db = open_db(path, create=False)
    conn = db.conn
    level = conn.isolation_level
    conn.isolation_level = None
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # A lock alone does not tell: a connection SQLite opened read-only can take one.
            conn.execute("CREATE TABLE diag_write_check (x)")
        finally:
            conn.execute("ROLLBACK")
    except sqlite3.Error as exc:
        raise StoreError(explain(exc, Path(path))) from exc
    finally:
        conn.isolation_level = level
        conn.close()


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _migrate(conn: sqlite3.Connection, db: sqlite_utils.Database, path: Path) -> None:
    """Apply the pending migrations as one transaction that holds the write lock from the start.

    Two processes opening the same new DB at once both see it unmigrated; ``BEGIN IMMEDIATE``
    makes the second wait for the first, and it re-reads what is applied once it holds the lock.
    The sqlite3 module would commit DDL statement by statement, so the transaction is explicit.
    """
    level = conn.isolation_level
    conn.isolation_level = None
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            tables = _tables(conn)
            _check_known(db, tables, path)
            applied = _applied(db, tables)
            pending = [(name, fn) for name, fn in MIGRATIONS if name not in applied]
            for name, fn in pending:
                fn(db)
                _insert(conn, "migrations", {"name": name, "applied_at": now()})
            if pending:
                _create_views(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    finally:
        conn.isolation_level = level
    _use_wal(conn)


def _use_wal(conn: sqlite3.Connection, patience_s: float = 60.0) -> None:
    """Switch a new DB to WAL, so readers never wait for a writer.

    The switch needs every other connection gone and SQLite does not wait for that on its own
    (no busy handler), so it is retried until this or another process has made it.
    """
    if conn.execute("PRAGMA journal_mode").fetchone()[0] == "memory":
        return  # a DB held in memory (a read-only input's migrated copy) has no journal file
    deadline = time.monotonic() + patience_s
    while conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        try:
            conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _applied(db: sqlite_utils.Database, tables: set[str]) -> set[str]:
    if "migrations" not in tables:
        return set()
    return {row["name"] for row in db.query("SELECT name FROM migrations")}


def _check_known(db: sqlite_utils.Database, tables: set[str], path: Path) -> None:
    known = {name for name, _ in MIGRATIONS}
    if tables and "migrations" not in tables:
        raise StoreError(f"{path} is an SQLite database but not one diag wrote (no migrations table)")
    unknown = _applied(db, tables) - known
    if unknown:
        raise StoreError(f"{path} was written by a newer diag (migrations {', '.join(sorted(unknown))}); "
                         "upgrade diag to read it")


def now() -> str:
    """The time a run or a row is stamped with: UTC, to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _storable(value: Any) -> Any:
    """Text as SQLite can hold it: lone surrogates (undecodable bytes) become backslash escapes."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def _insert(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> int:
    columns = ", ".join(f'"{c}"' for c in row)
    marks = ", ".join("?" for _ in row)
    cursor = conn.execute(f'INSERT INTO "{table}" ({columns}) VALUES ({marks})', [_storable(v) for v in row.values()])
    return int(cursor.lastrowid)


@dataclass
class RunRecord:
    """Everything one run produced, ready to store."""
    build: dict[str, Any]
    run: dict[str, Any]
    graph_breaks: list[dict[str, Any]]
    recompiles: list[dict[str, Any]]
    hidden_errors: list[dict[str, Any]]
    timings: list[dict[str, Any]]
    frames: list[dict[str, Any]] = field(default_factory=list)


def _build_id(conn: sqlite3.Connection, build: dict[str, Any]) -> int:
    row = conn.execute("SELECT id, wheel_url FROM torch_builds WHERE build_key = ?", [build["build_key"]]).fetchone()
    if row:
        if row[1] is None and build.get("wheel_url"):
            # the first time the build's wheel is known (an earlier run used an interpreter as it was)
            conn.execute("UPDATE torch_builds SET wheel_url = ?, wheel_origin = ?, wheel_sha256 = ? WHERE id = ?",
                         [*(build[c] for c in WHEEL_COLUMNS), row[0]])
        return int(row[0])
    return _insert(conn, "torch_builds", {**build, "first_seen": now()})


def _write_run(conn: sqlite3.Connection, record: RunRecord) -> int:
    run_id = _insert(conn, "runs", {**record.run, "torch_build_id": _build_id(conn, record.build)})
    for table in CHILD_TABLES:
        for row in getattr(record, table):
            _insert(conn, table, {**row, "run_id": run_id})
    return run_id


def save_run(db: sqlite_utils.Database, record: RunRecord) -> int:
    """Write a run and all its child rows in one transaction; returns the run id.

    StoreError with one line (a full disk, a read-only file, ...) when it cannot: nothing is written then.
    """
    return save_runs(db, [record])[0]


def save_runs(db: sqlite_utils.Database, records: Iterable[RunRecord]) -> list[int]:
    """Write many runs in one transaction (bulk loads: merges, benchmarks); all or none."""
    try:
        with db.conn:
            return [_write_run(db.conn, record) for record in records]
    except sqlite3.Error as exc:
        raise StoreError(explain(exc, path_of(db))) from exc


def get_run(db: sqlite_utils.Database, run_id: int) -> Optional[dict[str, Any]]:
    """A run with its build, child rows and decoded JSON fields; None when there is no such run."""
    return next(iter(full_runs(db, [run_id])), None)


def recent_runs(db: sqlite_utils.Database, limit: int = 20, case: Optional[str] = None) -> list[dict[str, Any]]:
    where, params = ("WHERE runs.\"case\" = ?", [case]) if case else ("", [])
    return list(db.query(
        f"SELECT runs.id, {_row_columns('runs.')}, runs.status, runs.graph_break_count, runs.recompile_count, "
        "runs.hidden_error_count, runs.compile_s, runs.eager_ms_per_token, runs.compiled_ms_per_token, "
        f"runs.started_at, b.version AS torch_version FROM runs JOIN torch_builds b ON b.id = runs.torch_build_id "
        f"{where} ORDER BY runs.id DESC LIMIT ?", [*params, limit]))


def integrity(db: sqlite_utils.Database) -> str:
    return str(db.execute("PRAGMA integrity_check").fetchone()[0])


def table_counts(db: sqlite_utils.Database, tables: Iterable[str] = ("runs", *CHILD_TABLES)) -> dict[str, int]:
    return {table: db[table].count for table in tables}


def builds(db: sqlite_utils.Database) -> list[dict[str, Any]]:
    return list(db.query("SELECT * FROM torch_builds"))


REPORT_COLUMNS = ("id", "uid", "torch_build_id", *rows.FIELDS, "status", "error_type",
                  "graph_count", "graph_break_count", "recompile_count", "hidden_error_count", "compile_s",
                  "eager_ms_per_token", "compiled_ms_per_token", "peak_mem_eager_mb", "peak_mem_compiled_mb",
                  "started_at", "transformers_version", "python")


REPORT_MESSAGE_CHARS = 300  # of each run's error message, what the report's front page may show


def report_runs(db: sqlite_utils.Database) -> list[dict[str, Any]]:
    """The columns the report's matrix and charts need, for every run, oldest first (error messages cut short)."""
    columns = ", ".join(f'"{c}"' for c in REPORT_COLUMNS)
    return list(db.query(f"SELECT {columns}, substr(error_message, 1, {REPORT_MESSAGE_CHARS}) AS error_message "
                         "FROM runs ORDER BY id"))


def finding_keys(db: sqlite_utils.Database | sqlite3.Connection, where: str = "") -> dict[int, set[tuple[str, str]]]:
    """Per run id, its (kind, key) pairs over graph breaks, recompiles and hidden errors (of the
    finding rows ``where`` selects, all without it)."""
    found: dict[int, set[tuple[str, str]]] = {}
    for table in FINDING_TABLES:
        for run_id, key in db.execute(f'SELECT run_id, key FROM "{table}" {where}'):
            found.setdefault(run_id, set()).add((table, key))
    return found


KEY_TEXT_CHARS = 160
# the page torch's graph-break messages link to (torch >= 2.8): .../compile-graph-break-site/gb/gb0124.html
DOC_URL = re.compile(r"https?://\S+?/gb/gb\d+\.html")


def key_texts(db: sqlite_utils.Database) -> dict[tuple[str, str], dict[str, Optional[str]]]:
    """Per (finding table, key), what it stands for: ``text``, the start of one finding's gb_type,
    reason or message, and ``doc_url``, the documentation page torch names for a graph break."""
    found: dict[tuple[str, str], dict[str, Optional[str]]] = {}
    for table in FINDING_TABLES:
        column = "message" if table == "hidden_errors" else "reason"
        extra = (", gb_type, substr(reason, instr(reason, '://') - 5, 200)" if table == "graph_breaks"
                 else ", NULL, NULL")
        for key, text, gb_type, tail in db.execute(
                f'SELECT key, substr({column}, 1, {KEY_TEXT_CHARS}){extra} FROM "{table}" GROUP BY key'):
            text = (gb_type or text or "").strip()
            doc = DOC_URL.search(tail or "")
            found[(table, key)] = {"text": text.splitlines()[0] if text else "", "doc_url": doc.group(0) if doc else None}
    return found


def full_runs(db: sqlite_utils.Database, run_ids: Iterable[int]) -> Iterable[dict[str, Any]]:
    """Full records (as get_run returns them) for many runs, fetched in batches."""
    ids = sorted(set(run_ids))
    for start in range(0, len(ids), 500):
        batch = ids[start:start + 500]
        marks = ", ".join("?" for _ in batch)
        runs = {row["id"]: row for row in db.query(
            "SELECT runs.*, b.version AS build_version, b.git_version AS build_git_version, "
            "b.nightly_date AS build_nightly_date, b.variant AS build_variant, b.wheel_url AS build_wheel_url, "
            "b.wheel_origin AS build_wheel_origin, b.wheel_sha256 AS build_wheel_sha256 FROM runs "
            f"JOIN torch_builds b ON b.id = runs.torch_build_id WHERE runs.id IN ({marks})", batch)}
        for run in runs.values():
            for table in CHILD_TABLES:
                run[table] = []
            for name in ("config", "capabilities", "counters", "extra"):
                run[name] = json.loads(run[name]) if run.get(name) else None
        for table in CHILD_TABLES:
            for row in db.query(f'SELECT * FROM "{table}" WHERE run_id IN ({marks}) ORDER BY id', batch):
                for name in ("samples", "summary", "extra"):
                    if row.get(name):
                        row[name] = json.loads(row[name])
                runs[row["run_id"]][table].append(row)
        yield from (runs[i] for i in batch if i in runs)


def run_records(db: sqlite_utils.Database) -> Iterable[RunRecord]:
    """Every run of ``db`` as a RunRecord (ids dropped), for copying into another DB."""
    build_columns = ("build_key", "version", "git_version", "nightly_date", "variant", "cuda_version", *WHEEL_COLUMNS)
    builds_by_id = {row["id"]: {k: row[k] for k in build_columns} for row in db.query("SELECT * FROM torch_builds")}
    ids = [row[0] for row in db.execute("SELECT id FROM runs ORDER BY id")]
    for start in range(0, len(ids), 500):
        batch = ids[start:start + 500]
        marks = ", ".join("?" for _ in batch)
        raw_runs = {row["id"]: row for row in db.query(f"SELECT * FROM runs WHERE id IN ({marks})", batch)}
        children: dict[int, dict[str, list]] = {i: {t: [] for t in CHILD_TABLES} for i in batch}
        for table in CHILD_TABLES:
            for row in db.query(f'SELECT * FROM "{table}" WHERE run_id IN ({marks}) ORDER BY id', batch):
                run_id = row.pop("run_id")
                row.pop("id")
                children[run_id][table].append(row)
        for run_id in batch:
            run = dict(raw_runs[run_id])
            build = builds_by_id[run.pop("torch_build_id")]
            run.pop("id")
            yield RunRecord(build=build, run=run, **children[run_id])


def merge(target: sqlite_utils.Database, shard: sqlite_utils.Database) -> tuple[int, int]:
    """Copy the runs of ``shard`` that ``target`` lacks (matched by uid), in one transaction.

    Returns (added, already present). Merging the same shard twice adds nothing.
    """
    try:
        verdict = str(shard.execute("PRAGMA quick_check").fetchone()[0])
        if verdict != "ok":
            raise StoreError(f"the shard is damaged ({verdict.splitlines()[0]}); nothing merged")
        known = {row[0] for row in target.execute("SELECT uid FROM runs")}
        folded = folded_before(target)  # a run diag prune folded into counts is not added again

        def absent(record: RunRecord) -> bool:
            last = folded.get((record.build.get("build_key"), *(record.run.get(name) for name in rows.FIELDS)))
            return record.run["uid"] not in known and (last is None or (record.run.get("started_at") or "") > last)

        fresh = [record for record in run_records(shard) if absent(record)]
        seen = sum(1 for _ in shard.execute("SELECT 1 FROM runs")) - len(fresh)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"the shard cannot be read ({exc}); nothing merged") from exc
    save_runs(target, fresh)
    return len(fresh), seen


PRUNED_TEXT_LINES = 20  # of a pruned run's tracebacks and stderr tail, the last lines kept
PRUNED_TEXT_CHARS = 400  # of a pruned run's finding messages, the start kept


def _summary(samples: list[float]) -> dict[str, Any]:
    from diag.regress import quantile

    return {"n": len(samples), "median": statistics.median(samples), "p10": quantile(samples, 0.1),
            "p90": quantile(samples, 0.9)}


def _tail(text: Optional[str]) -> Optional[str]:
    if not text:
        return text
    lines = text.splitlines()
    return "\n".join(lines[-PRUNED_TEXT_LINES:]) if len(lines) > PRUNED_TEXT_LINES else text


def prune(db: sqlite_utils.Database, keep_builds: int, keep_runs: int = 10, thin_after: int = 30) -> dict[str, int]:
    """Keep a history bounded however long it lives: full detail for the newest, verdicts for the rest.

    - Full detail: on the newest ``keep_builds`` builds of each variant, each row's runs of its
      newest two ``diag run`` invocations (what ``check`` pools on one build).
    - Compacted, every other run: it keeps its status, error (the start of its message), counts,
      per-run medians, and each finding's key, location, count and the start of its message:
      everything a verdict or the report's matrix reads. It loses its raw timing samples (a
      summary of its decode steps stays: n, median, p10, p90), its other timing series, its
      compiled frames, its capabilities and counters, and the bulk of its tracebacks and stderr.
    - Folded into counts (``folded_runs``: build, row, status, error and finding keys, how many,
      first and last start): of each build, a row's runs beyond its newest ``keep_runs``, and on
      an older build beyond its newest two invocations (a release leg re-runs one build every
      night); and the runs of a row on an old nightly where no verdict turns on (``thinned``).
    The file is vacuumed when a tenth of it is free pages. Returns how many builds were old, how
    many runs and series were compacted, how many runs were folded, and of how many (build, row)
    cells of old nightlies.
    """
    variants: dict[str, list[dict[str, Any]]] = {}
    for build in sorted(builds(db), key=build_order):
        variants.setdefault(build["variant"], []).append(build)
    recent = {build["id"] for same in variants.values() for build in same[-keep_builds:]}
    thin = thinned(db, variants, thin_after)
    kept: set[int] = set()
    surplus: list[int] = []
    cells: set[tuple] = set()  # (build, *row) thinned by this prune
    per_row: dict[tuple, list] = {}  # (build, *row) -> the invocations seen, newest first
    for run_id, build_id, invocation, *row in db.execute(
            f"SELECT id, torch_build_id, invocation, {_row_columns()} FROM runs ORDER BY id DESC"):
        cell = (build_id, *row)
        seen = per_row.setdefault(cell, [0, []])
        seen[0] += 1
        invocation = invocation or f"run {run_id}"  # runs stored before invocations were: each alone
        if invocation not in seen[1]:
            seen[1].append(invocation)
        newest_two = seen[1].index(invocation) < 2
        if cell in thin or seen[0] > keep_runs or not (newest_two or build_id in recent):
            surplus.append(run_id)
            if cell in thin:
                cells.add(cell)
        elif build_id in recent and newest_two:
            kept.add(run_id)
    with db.conn:
        folded = _fold(db.conn, surplus)
        db.execute("CREATE TEMP TABLE IF NOT EXISTS pruned (id INTEGER PRIMARY KEY)")
        db.execute("DELETE FROM pruned")
        db.conn.executemany("INSERT INTO pruned (id) SELECT id FROM runs WHERE id = ? AND capabilities IS NOT NULL",
                            [(i,) for i in set(r[0] for r in db.execute("SELECT id FROM runs")) - kept])
        compacted = db.execute("SELECT count(*) FROM pruned").fetchone()[0]
        series = 0
        # of a compacted run's timings, the decode steps' summary stays (its medians are run columns)
        db.execute("DELETE FROM timings WHERE run_id IN (SELECT id FROM pruned) AND metric != 'decode_step'")
        raw = db.execute("SELECT id, samples FROM timings WHERE run_id IN (SELECT id FROM pruned) "
                         "AND samples IS NOT NULL").fetchall()
        for timing_id, samples in raw:
            values = json.loads(samples)
            summary = json.dumps(_summary(values)) if values else None
            db.execute("UPDATE timings SET samples = NULL, summary = ? WHERE id = ?", [summary, timing_id])
            series += 1
        for run_id, tb, stderr in db.execute("SELECT id, traceback, stderr_tail FROM runs "
                                             "WHERE id IN (SELECT id FROM pruned)").fetchall():
            # per-run detail a verdict never reads: what each collector could do, dynamo's raw counters
            db.execute("UPDATE runs SET traceback = ?, stderr_tail = ?, capabilities = NULL, counters = NULL, "
                       f"error_message = substr(error_message, 1, {PRUNED_TEXT_CHARS}) WHERE id = ?",
                       [_tail(tb), _tail(stderr), run_id])
        of_pruned = "run_id IN (SELECT id FROM pruned)"
        db.execute(f"DELETE FROM frames WHERE {of_pruned}")
        # findings keep their key, location and count, and the start of what torch said
        db.execute(f"UPDATE hidden_errors SET traceback = NULL, message = substr(message, 1, {PRUNED_TEXT_CHARS}) "
                   f"WHERE {of_pruned}")
        for table in ("graph_breaks", "recompiles"):
            db.execute(f"UPDATE {table} SET reason = substr(reason, 1, {PRUNED_TEXT_CHARS}) WHERE {of_pruned} "
                       f"AND length(reason) > {PRUNED_TEXT_CHARS}")
    pages, free = (db.execute(f"PRAGMA {name}").fetchone()[0] for name in ("page_count", "freelist_count"))
    if free * 10 > pages:
        db.execute("VACUUM")  # cleared columns and folded runs leave pages empty, which only a rewrite returns
    return {"builds": sum(len(same) for same in variants.values()) - len(recent), "runs": compacted,
            "series": series, "folded": folded, "thinned": len(cells)}


def thinned(db: sqlite_utils.Database, variants: dict[str, list[dict[str, Any]]], thin_after: int) -> set[tuple]:
    """(build id, *row) of old nightlies whose runs fold into counts without changing any verdict.

    Of each variant's builds (in version order) all but the newest ``thin_after`` are old. A row's
    runs on an old nightly stay when that build is the row's first or last, or when the row's
    outcomes there (statuses, error keys and finding keys) differ from the build before or after
    it with that row: every transition and key change keeps both its builds, so ``check``,
    ``bisect`` over stored builds and the report read the same changes. A timed row (one with a
    compiled per-token median) also stays on the first nightly of each ISO week: a weekly trend.
    Folded runs count as outcomes, so what is folded once stays folded.
    """
    old: dict[int, bool] = {}  # build id -> whether it is the first nightly of its week
    for same in variants.values():
        weeks: set[tuple] = set()
        for build in same[:-thin_after] if len(same) > thin_after else []:
            night = build.get("nightly_date")
            if night:
                week = date.fromisoformat(night).isocalendar()[:2]
                old[build["id"]] = week not in weeks
                weeks.add(week)
    if not old:
        return set()
    columns = _row_columns()
    keys = _finding_keys_text(db.conn)
    outcomes: dict[tuple, dict[int, set]] = {}
    timed: set[tuple] = set()
    for run_id, build_id, *row, status, key, median in db.execute(
            f"SELECT id, torch_build_id, {columns}, status, error_key, compiled_ms_per_token FROM runs"):
        outcomes.setdefault(tuple(row), {}).setdefault(build_id, set()).add((status, key, keys.get(run_id, "")))
        if median is not None:
            timed.add(tuple(row))
    for build_id, *row, status, key, found in db.execute(
            f"SELECT torch_build_id, {columns}, status, error_key, finding_keys FROM folded_runs"):
        outcomes.setdefault(tuple(row), {}).setdefault(build_id, set()).add((status, key, found or ""))
    fold: set[tuple] = set()
    for same in variants.values():
        position = {build["id"]: index for index, build in enumerate(same)}
        for row, by_build in outcomes.items():
            line = sorted((b for b in by_build if b in position), key=position.__getitem__)
            if not line:
                continue
            keep = {line[0], line[-1]}
            for before, after in zip(line, line[1:]):
                if by_build[before] != by_build[after]:
                    keep.update((before, after))
            fold.update((build_id, *row) for build_id in line if build_id in old and build_id not in keep
                        and not (old[build_id] and row in timed))
    return fold


def _finding_keys_text(conn: sqlite3.Connection, where: str = "") -> dict[int, str]:
    """Per run id, its finding keys as one text (``table:key`` sorted, ``;``-joined)."""
    return {run_id: ";".join(sorted(f"{table}:{key}" for table, key in pairs))
            for run_id, pairs in finding_keys(conn, where).items()}


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
            f"SELECT id, torch_build_id, {_row_columns()}, status, error_key, started_at FROM runs "
            "WHERE id IN (SELECT id FROM folding)").fetchall():
        group = groups.setdefault((*outcome, keys.get(run_id)), [0, []])
        group[0] += 1
        if started:
            group[1].append(started)
    names = ["torch_build_id", *rows.FIELDS, "status", "error_key", "finding_keys"]
    same = " AND ".join(f'"{name}" IS ?' for name in names)
    for key, (count, starts) in groups.items():
        first, last = (min(starts), max(starts)) if starts else (None, None)
        known = conn.execute(f"SELECT id, runs, first_started_at, last_started_at FROM folded_runs WHERE {same}",
                             key).fetchone()
        if known:
            folded_id, runs, was_first, was_last = known
            conn.execute("UPDATE folded_runs SET runs = ?, first_started_at = ?, last_started_at = ? WHERE id = ?",
                         [runs + count, min(filter(None, (first, was_first)), default=None),
                          max(filter(None, (last, was_last)), default=None), folded_id])
        else:
            _insert(conn, "folded_runs", {**dict(zip(names, key)), "runs": count, "first_started_at": first,
                                          "last_started_at": last})
    for table in CHILD_TABLES:
        conn.execute(f'DELETE FROM "{table}" WHERE run_id IN (SELECT id FROM folding)')
    conn.execute("DELETE FROM runs WHERE id IN (SELECT id FROM folding)")
    return len(run_ids)


def folded_total(db: sqlite_utils.Database) -> int:
    """How many runs ``diag prune`` has folded into counts."""
    return int(db.execute("SELECT coalesce(sum(runs), 0) FROM folded_runs").fetchone()[0])


def folded_before(db: sqlite_utils.Database) -> dict[tuple, str]:
    """(build key, *row) -> when the newest run folded into that build's row started."""
    return {tuple(key): last for *key, last in db.execute(
        f"SELECT b.build_key, {_row_columns('f.')}, max(f.last_started_at) FROM folded_runs f "
        f"JOIN torch_builds b ON b.id = f.torch_build_id GROUP BY b.build_key, {_row_columns('f.')}")}


def path_of(db: sqlite_utils.Database) -> Path:
    """The file behind ``db`` (empty for a DB held in memory)."""
    return Path(db.conn.execute("PRAGMA database_list").fetchone()[2] or "")


def find_build(db: sqlite_utils.Database, ref: str) -> dict[str, Any]:
    """The build named by ``ref``: a version (exact, else a unique prefix), a git commit prefix, or build:ID."""
    all_builds = builds(db)
    if ref.startswith("build:") and ref[6:].isdigit():
        matches = [b for b in all_builds if b["id"] == int(ref[6:])]
    else:
        matches = [b for b in all_builds if b["version"] == ref]
        matches = matches or [b for b in all_builds if b["version"].startswith(ref)
                              or (b["git_version"] or "").startswith(ref)]
    if len(matches) != 1:
        names = ", ".join(sorted(b["version"] for b in matches)) or "none"
        raise StoreError(f"build {ref!r} matches {len(matches)} builds ({names}); "
                         "give a full version, a git commit prefix, or build:ID")
    return matches[0]


def runs_of_build(db: sqlite_utils.Database, build_id: int) -> list[dict[str, Any]]:
    """Full records of every run on one build, oldest first."""
    ids = [row[0] for row in db.execute("SELECT id FROM runs WHERE torch_build_id = ? ORDER BY id", [build_id])]
    return list(full_runs(db, ids))
