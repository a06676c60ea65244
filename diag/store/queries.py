"""Reads: what the commands, the gate and the report ask of a DB."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any, Iterable, Optional, cast

import sqlite_utils

from diag import row as rows
from diag.contract import FINDING_TABLES
from diag.store.connection import StoreError, connect, dict_rows
from diag.store.schema import CHILD_TABLES, row_columns
from diag.store.typed import StoredRace, StoredRun, TorchBuildRow
from diag.store.typing_source import CHILD_JSON, DECODED

FEW_IDS = 500  # ids in one IN (...) list, below SQLite's oldest limit on parameters (999)


def _numbers_only(db: sqlite_utils.Database | sqlite3.Connection, rows: list[dict[str, Any]]) -> list[StoredRun]:
    """``rows`` of runs with each value of a numeric column that is no number (SQLite keeps text in an
    INTEGER column: a DB written by another program, or edited) read as None, so that what reads a
    count or a time says it is missing instead of failing on it."""
    if not rows:
        return []
    conn = db.conn if isinstance(db, sqlite_utils.Database) else db
    numeric = sorted(
        name
        for _, name, declared, *_ in conn.execute("PRAGMA table_info(runs)").fetchall()
        if any(kind in (declared or "").upper() for kind in ("INT", "REAL", "FLOA", "DOUB"))
        and name in rows[0]
        and name not in ("id", "torch_build_id")
    )
    if not numeric or "id" not in rows[0]:
        return cast(list[StoredRun], rows)
    # one query in SQLite finds the runs that hold any: none, almost always, and nothing else is read;
    # by id where the rows are few (a run's page, a cell), one scan of the table where they are many
    odd = " OR ".join(f"typeof(\"{name}\") NOT IN ('integer', 'real', 'null')" for name in numeric)
    ids = [row["id"] for row in rows]
    few = len(ids) <= FEW_IDS
    where = f"id IN ({', '.join('?' * len(ids))}) AND ({odd})" if few else odd
    found = {run_id for (run_id,) in conn.execute(f"SELECT id FROM runs WHERE {where}", ids if few else [])}
    for row in rows:
        if row["id"] in found:
            for name in numeric:
                if row[name] is not None and not isinstance(row[name], (int, float)):
                    row[name] = None
    return cast(list[StoredRun], rows)


def get_run(db: sqlite_utils.Database, run_id: int) -> Optional[StoredRun]:
    """A run with its build, child rows and decoded JSON fields; None when there is no such run."""
    return next(iter(full_runs(db, [run_id])), None)


def recent_runs(db: sqlite_utils.Database, limit: int = 20, case: Optional[str] = None) -> list[StoredRun]:
    where, params = ('WHERE runs."case" = ?', [case]) if case else ("", [])
    return _numbers_only(
        db,
        list(
            db.query(
                f"SELECT runs.id, {row_columns('runs.')}, runs.status, runs.graph_break_count, runs.recompile_count, "
                "runs.hidden_error_count, runs.compile_s, runs.eager_ms_per_token, runs.compiled_ms_per_token, "
                "runs.timing_noisy, runs.timing_note, runs.compile_noisy, runs.compile_note, runs.eager_ms_low, "
                "runs.eager_ms_high, runs.compiled_ms_low, runs.compiled_ms_high, "
                "runs.compile_instructions, runs.started_at, b.version AS torch_version "
                f"FROM runs JOIN torch_builds b ON b.id = runs.torch_build_id "
                f"{where} ORDER BY runs.id DESC LIMIT ?",
                [*params, limit],
            )
        ),
    )


def newest_status(path: Path, row: rows.Row) -> Optional[str]:
    """The status of the newest stored run of ``row`` (on any build) in the DB at ``path``; None
    when there is no such run or no readable DB. Read-only: the runner asks it before each run,
    while the DB may be written by the command that started the run."""
    if not path.is_file():
        return None
    clauses = [
        # runs stored before case sources were recorded are built-in (rows.of)
        '("case_source" IS ? OR "case_source" IS NULL)'
        if field == "case_source" and value == rows.BUILTIN
        else f'"{field}" IS ?'
        for field, value in zip(rows.FIELDS, row)
    ]
    try:
        conn = connect(path, readonly=True, timeout=5)
        try:
            found = conn.execute(
                f"SELECT status FROM runs WHERE {' AND '.join(clauses)} ORDER BY id DESC LIMIT 1", list(row)
            ).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return found[0] if found else None


def table_counts(db: sqlite_utils.Database, tables: Iterable[str] = ("runs", *CHILD_TABLES)) -> dict[str, int]:
    return {table: db[table].count for table in tables}


def builds(db: sqlite_utils.Database) -> list[TorchBuildRow]:
    return cast(list[TorchBuildRow], list(db.query("SELECT * FROM torch_builds")))


def build_stamps(db: sqlite_utils.Database) -> dict[int, int]:
    """Per build id, its stamp: a number every write touching the build's runs replaces (schema.py,
    ``m018_build_stamps``)."""
    return dict(db.execute("SELECT torch_build_id, stamp FROM build_stamps").fetchall())


REPORT_COLUMNS = (
    "id",
    "uid",
    "torch_build_id",
    *rows.FIELDS,
    "status",
    "error_type",
    "graph_count",
    "graph_break_count",
    "recompile_count",
    "decode_recompile_steps",
    "hidden_error_count",
    "error_location",
    "compile_s",
    "compile_warm_s",
    "compile_noisy",
    "compile_instructions",
    "eager_ms_per_token",
    "compiled_ms_per_token",
    "peak_mem_eager_mb",
    "peak_mem_compiled_mb",
    "guard_latency_us",
    "timing_noisy",
    "started_at",
    "transformers_version",
    "python",
)

REPORT_MESSAGE_CHARS = 300  # of each run's error message, what the report's front page may show


def report_runs(db: sqlite_utils.Database, build_ids: Optional[Iterable[int]] = None) -> list[StoredRun]:
    """The columns the report's matrix and charts need, for every run (of the builds ``build_ids``,
    where given), oldest first (error messages cut short)."""
    columns = ", ".join(f'"{c}"' for c in REPORT_COLUMNS)
    found = dict_rows(
        db.conn,
        f"SELECT {columns}, substr(error_message, 1, {REPORT_MESSAGE_CHARS}) AS error_message FROM runs"
        f"{of_builds('torch_build_id', build_ids)} ORDER BY id",
    )
    return _numbers_only(db, found)


def of_builds(column: str, build_ids: Optional[Iterable[int]]) -> str:
    """A WHERE clause that keeps the rows whose ``column`` is one of ``build_ids``; none where it is None."""
    if build_ids is None:
        return ""
    return f" WHERE {column} IN ({', '.join(str(int(build_id)) for build_id in build_ids)})"


def run_builds(db: sqlite_utils.Database) -> set[int]:
    """The builds with runs."""
    return {build_id for (build_id,) in db.execute("SELECT DISTINCT torch_build_id FROM runs").fetchall()}


def environments(db: sqlite_utils.Database, digests: Iterable[Optional[str]]) -> dict[str, dict[str, Any]]:
    """The ``environments`` rows of ``digests`` (runs' ``environment``), by digest, their packages
    decoded; none for a run stored before environments were, or from a DB without the table."""
    wanted = sorted({d for d in digests if d})
    if not wanted or "environments" not in db.table_names():
        return {}
    found = {}
    for start in range(0, len(wanted), FEW_IDS):
        part = wanted[start : start + FEW_IDS]
        query = f"SELECT * FROM environments WHERE digest IN ({', '.join('?' * len(part))})"
        for row in db.query(query, part):
            found[row["digest"]] = {**row, "packages": json.loads(row["packages"] or "{}")}
    return found


def nights_per_build(db: sqlite_utils.Database) -> dict[int, int]:
    """Per build, on how many distinct days (UTC, by ``started_at``) its runs started."""
    query = "SELECT torch_build_id, count(DISTINCT substr(started_at, 1, 10)) FROM runs GROUP BY torch_build_id"
    return {int(build_id): int(nights) for build_id, nights in db.execute(query).fetchall()}


def bisects(db: sqlite_utils.Database) -> dict[str, dict[str, Any]]:
    """The newest stored bisect of each row (by its label); none from a DB without the table."""
    if "bisects" not in db.table_names():
        return {}
    return {row["row"]: row for row in db.query("SELECT * FROM bisects ORDER BY id")}


def run_count(db: sqlite_utils.Database) -> int:
    """How many runs the DB holds (not counting those folded into counts)."""
    return int(db.execute("SELECT count(*) FROM runs").fetchone()[0])


def run_owners(db: sqlite_utils.Database, run_ids: Iterable[int]) -> dict[int, int]:
    """Run id -> the build it ran on, for ``run_ids``."""
    return dict(db.execute(f"SELECT id, torch_build_id FROM runs{of_builds('id', run_ids)}").fetchall())


def break_rows(db: sqlite_utils.Database, build_ids: Optional[Iterable[int]]) -> list[tuple[Any, ...]]:
    """Every graph break of the runs on ``build_ids`` (all builds where None), oldest run first: key,
    gb_type, reason, resumable, location, count, run id, case, build id."""
    return db.execute(
        """SELECT g.key, g.gb_type, g.reason, g.resumable, g.location, g.count, r.id, r."case", r.torch_build_id
           FROM graph_breaks g JOIN runs r ON r.id = g.run_id"""
        + of_builds("r.torch_build_id", build_ids)
        + " ORDER BY r.id, g.id"
    ).fetchall()


def hidden_rows(db: sqlite_utils.Database, build_ids: Optional[Iterable[int]]) -> list[tuple[Any, ...]]:
    """Every hidden error of the runs on ``build_ids`` (all builds where None), oldest run first, in
    ``break_rows``' shape: key, exception type, "type: message", None (resumable), location, count,
    run id, case, build id."""
    return db.execute(
        """SELECT h.key, h.exc_type, COALESCE(h.exc_type || ': ', '') || COALESCE(h.message, ''), NULL,
                  h.location, h.count, r.id, r."case", r.torch_build_id
           FROM hidden_errors h JOIN runs r ON r.id = h.run_id"""
        + of_builds("r.torch_build_id", build_ids)
        + " ORDER BY r.id, h.id"
    ).fetchall()


def run_columns(db: sqlite_utils.Database, columns: Iterable[str]) -> Iterable[dict[str, Any]]:
    """Every run's ``columns``, as dicts."""
    quoted = ", ".join(f'"{column}"' for column in columns)
    return db.query(f"SELECT {quoted} FROM runs")


def newest_run(db: sqlite_utils.Database) -> Optional[tuple[int, Optional[str]]]:
    """The id and start of the run stored last."""
    return db.execute("SELECT id, started_at FROM runs ORDER BY id DESC LIMIT 1").fetchone()


def finding_keys(
    db: sqlite_utils.Database | sqlite3.Connection, where: str = "", tables: Iterable[str] = FINDING_TABLES
) -> dict[int, set[tuple[str, str]]]:
    """Per run id, its (kind, key) pairs over graph breaks, recompiles and hidden errors (of the
    finding rows ``where`` selects, all without it; of ``tables`` only, where given)."""
    found: dict[int, set[tuple[str, str]]] = {}
    for table in tables:
        for run_id, key in db.execute(f'SELECT run_id, key FROM "{table}" {where}'):
            found.setdefault(run_id, set()).add((table, key))
    return found


def finding_keys_of_builds(
    db: sqlite_utils.Database | sqlite3.Connection, build_ids: Optional[list[int]]
) -> dict[int, set[tuple[str, str]]]:
    """``finding_keys`` of the runs on the builds ``build_ids`` (of every run where None)."""
    if build_ids is None:
        return finding_keys(db)
    return finding_keys(db, f"WHERE run_id IN (SELECT id FROM runs{of_builds('torch_build_id', build_ids)})")


def hidden_keys(db: sqlite_utils.Database | sqlite3.Connection) -> dict[int, list[str]]:
    """Per run id with hidden errors, their keys, sorted."""
    return {
        run_id: sorted(key for _, key in pairs) for run_id, pairs in finding_keys(db, tables=("hidden_errors",)).items()
    }


KEY_TEXT_CHARS = 160

# The page torch's graph-break messages link to (torch >= 2.8). Only that host is linked: the text is
# stored data, and a message naming another host (https://evil.example/.../gb/gb0001.html) is shown, not linked.
DOC_URL = re.compile(r"https://meta-pytorch\.github\.io/compile-graph-break-site/gb/gb\d{4}\.html(?![\w/.-])")


def key_texts(db: sqlite_utils.Database) -> dict[tuple[str, str], dict[str, Optional[str]]]:
    """Per (finding table, key), what it stands for: ``text``, the start of its first finding's
    gb_type, reason or message, and ``doc_url``, the documentation page torch names for a graph break.
    The first finding (the least rowid: SQLite takes the bare columns from the row min() picks), not
    whichever row the query plan meets, so that a key found again in other words (an address, a
    number its key leaves out) keeps its text from night to night, whatever indexes the DB has."""
    found: dict[tuple[str, str], dict[str, Optional[str]]] = {}
    for table in FINDING_TABLES:
        column = "message" if table == "hidden_errors" else "reason"
        extra = (
            ", gb_type, substr(reason, instr(reason, '://') - 5, 200)" if table == "graph_breaks" else ", NULL, NULL"
        )
        for key, _, text, gb_type, tail in db.execute(
            f'SELECT key, min(rowid), substr({column}, 1, {KEY_TEXT_CHARS}){extra} FROM "{table}" GROUP BY key'
        ):
            text = (gb_type or text or "").strip()
            doc = DOC_URL.search(tail or "")
            found[(table, key)] = {
                "text": text.splitlines()[0] if text else "",
                "doc_url": doc.group(0) if doc else None,
            }
    return found


def full_runs(db: sqlite_utils.Database, run_ids: Iterable[int]) -> Iterable[StoredRun]:
    """Full records (as get_run returns them) for many runs, fetched in batches. An id beyond what
    SQLite's INTEGER holds names no run."""
    ids = sorted({run_id for run_id in run_ids if -(2**63) <= run_id < 2**63})
    for start in range(0, len(ids), 500):
        batch = ids[start : start + 500]
        marks = ", ".join("?" for _ in batch)
        runs = {
            row["id"]: row
            for row in db.query(
                "SELECT runs.*, b.version AS build_version, b.git_version AS build_git_version, "
                "b.nightly_date AS build_nightly_date, b.variant AS build_variant, b.wheel_url AS build_wheel_url, "
                "b.wheel_origin AS build_wheel_origin, b.wheel_sha256 AS build_wheel_sha256 FROM runs "
                f"JOIN torch_builds b ON b.id = runs.torch_build_id WHERE runs.id IN ({marks})",
                batch,
            )
        }
        _numbers_only(db, list(runs.values()))
        for run in runs.values():
            for table in CHILD_TABLES:
                run[table] = []
            for name in DECODED:
                run[name] = _json_object(run.get(name))
        for table in CHILD_TABLES:
            for row in db.query(f'SELECT * FROM "{table}" WHERE run_id IN ({marks}) ORDER BY id', batch):
                for name in CHILD_JSON:
                    if row.get(name):
                        row[name] = json.loads(row[name])
                runs[row["run_id"]][table].append(row)
        yield from (cast(StoredRun, runs[i]) for i in batch if i in runs)


def _json_object(text: Optional[str]) -> Optional[dict[str, Any]]:
    """A JSON-object column as read: None where it is empty, or holds what is no JSON object (a DB
    written by another diag, or edited): its readers say it is missing, never fail on it."""
    try:
        found = json.loads(text) if text else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def folded_total(db: sqlite_utils.Database) -> int:
    """How many runs ``diag prune`` has folded into counts."""
    return int(db.execute("SELECT coalesce(sum(runs), 0) FROM folded_runs").fetchone()[0])


def folded_before(db: sqlite_utils.Database) -> dict[tuple, str]:
    """(build key, *row) -> when the newest run folded into that build's row started."""
    return {
        tuple(key): last
        for *key, last in db.execute(
            f"SELECT b.build_key, {row_columns('f.')}, max(f.last_started_at) FROM folded_runs f "
            f"JOIN torch_builds b ON b.id = f.torch_build_id GROUP BY b.build_key, {row_columns('f.')}"
        )
    }


def find_build(db: sqlite_utils.Database, ref: str) -> TorchBuildRow:
    """The build named by ``ref``: a version (exact, else a unique prefix), a git commit prefix, or build:ID."""
    all_builds = builds(db)
    if ref.startswith("build:") and ref[6:].isdigit():
        matches = [b for b in all_builds if b["id"] == int(ref[6:])]
    else:
        matches = [b for b in all_builds if b["version"] == ref]
        matches = matches or [
            b for b in all_builds if (b["version"] or "").startswith(ref) or (b["git_version"] or "").startswith(ref)
        ]
    if len(matches) != 1:
        names = ", ".join(sorted(b["version"] or "?" for b in matches)) or "none"
        raise StoreError(
            f"build {ref!r} matches {len(matches)} builds ({names}); "
            "give a full version, a git commit prefix, or build:ID"
        )
    return matches[0]


def runs_of_build(db: sqlite_utils.Database, build_id: int) -> list[StoredRun]:
    """Full records of every run on one build, oldest first."""
    ids = [row[0] for row in db.execute("SELECT id FROM runs WHERE torch_build_id = ? ORDER BY id", [build_id])]
    return list(full_runs(db, ids))


def page_marks(db: sqlite_utils.Database, run_ids: Iterable[int]) -> dict[int, tuple[Any, ...]]:
    """Per run, what its report page changes with once the run is stored: its uid, whether ``diag
    prune`` compacted it (compaction clears its capabilities), its build's fields (a later run of
    the build records its wheel) and, last, its run directory."""
    ids = sorted(set(run_ids))
    found: dict[int, tuple[Any, ...]] = {}
    for start in range(0, len(ids), 500):
        batch = ids[start : start + 500]
        marks = ", ".join("?" for _ in batch)
        for run_id, *rest in db.execute(
            "SELECT r.id, r.uid, r.capabilities IS NULL, b.version, b.git_version, b.nightly_date, b.variant, "
            "b.wheel_url, b.wheel_origin, b.wheel_sha256, r.artifacts_dir FROM runs r "
            f"JOIN torch_builds b ON b.id = r.torch_build_id WHERE r.id IN ({marks})",
            batch,
        ):
            found[run_id] = (run_id, *rest)
    return found


def races(db: sqlite_utils.Database) -> list[StoredRace]:
    """Every stored race row, oldest first, each with its build's version."""
    return cast(
        list[StoredRace],
        dict_rows(
            db.conn,
            "SELECT r.*, b.version AS torch_version FROM races r JOIN torch_builds b ON b.id = r.torch_build_id "
            "ORDER BY r.id",
        ),
    )
