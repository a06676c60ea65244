"""The schema: tables, named migrations (each applied once, recorded in ``migrations``; those after
m012 are in schema_added.py), the Datasette views over the one row definition (what each column
holds: descriptions.py)."""

from __future__ import annotations

import sqlite_utils

from diag import row as rows
from diag.contract import FINDING_TABLES
from diag.store import schema_added  # noqa: F401  (registers m013 on; the registry keeps names in order)
from diag.store.migrations import MIGRATIONS, migration

__all__ = ["CHILD_TABLES", "MIGRATIONS", "WHEEL_COLUMNS", "migration", "row_columns"]


@migration
def m001_initial(db: sqlite_utils.Database) -> None:
    db.table("migrations").create({"name": str, "applied_at": str}, pk="name")
    db.table("torch_builds").create(
        {
            "id": int,
            "build_key": str,
            "version": str,
            "git_version": str,
            "nightly_date": str,
            "variant": str,
            "cuda_version": str,
            "first_seen": str,
        },
        pk="id",
    )
    db.table("torch_builds").create_index(["build_key"], unique=True)
    db.table("runs").create(
        {
            "id": int,
            "uid": str,
            "torch_build_id": int,
            "case": str,
            "config": str,
            "backend": str,
            "fullgraph": int,
            "dynamic": str,
            "mode": str,
            "device": str,
            "dtype": str,
            "batch_size": int,
            "prompt_length": int,
            "new_tokens": int,
            "model": str,
            "status": str,
            "error_type": str,
            "error_message": str,
            "error_location": str,
            "traceback": str,
            "graph_count": int,
            "graph_break_count": int,
            "recompile_count": int,
            "hidden_error_count": int,
            "compile_s": float,
            "eager_ms_per_token": float,
            "compiled_ms_per_token": float,
            "peak_mem_eager_mb": float,
            "peak_mem_compiled_mb": float,
            "memory_kind": str,
            "tokens_equal": int,
            "max_abs_diff": float,
            "first_differing_step": int,
            "eager_margin": float,
            "oracle_equal": int,
            "capabilities": str,
            "counters": str,
            "timing_error": str,
            "torch_version": str,
            "transformers_version": str,
            "depyf_version": str,
            "python": str,
            "platform": str,
            "device_name": str,
            "host": str,
            "started_at": str,
            "duration_s": float,
            "tool_version": str,
            "artifacts_dir": str,
            "exit_code": int,
            "signal": int,
            "stderr_tail": str,
        },
        pk="id",
        foreign_keys=[("torch_build_id", "torch_builds", "id")],
    )
    db.table("runs").create_index(["uid"], unique=True)
    db.table("runs").create_index(["torch_build_id", "case"])
    db.table("graph_breaks").create(
        {
            "id": int,
            "run_id": int,
            "key": str,
            "reason": str,
            "gb_type": str,
            "user_file": str,
            "user_line": int,
            "resumable": int,
            "decode_step": int,
            "count": int,
        },
        pk="id",
        foreign_keys=[("run_id", "runs", "id")],
    )
    db.table("recompiles").create(
        {
            "id": int,
            "run_id": int,
            "key": str,
            "reason": str,
            "function": str,
            "frame": str,
            "decode_step": int,
            "guard_failures": int,
        },
        pk="id",
        foreign_keys=[("run_id", "runs", "id")],
    )
    db.table("hidden_errors").create(
        {
            "id": int,
            "run_id": int,
            "key": str,
            "source": str,
            "exc_type": str,
            "message": str,
            "logger": str,
            "frame": str,
            "traceback": str,
            "decode_step": int,
            "count": int,
        },
        pk="id",
        foreign_keys=[("run_id", "runs", "id")],
    )
    db.table("timings").create(
        {"id": int, "run_id": int, "pass": str, "metric": str, "unit": str, "samples": str},
        pk="id",
        foreign_keys=[("run_id", "runs", "id")],
    )
    for table in ("graph_breaks", "recompiles", "hidden_errors", "timings"):
        db.table(table).create_index(["run_id"])


CHILD_TABLES = (*FINDING_TABLES, "timings", "frames")


@migration
def m002_views(db: sqlite_utils.Database) -> None:
    """Views for browsing the DB in Datasette or sqlite3."""
    db.create_view(
        "run_summary",
        """
        SELECT runs.id, b.version AS torch_version, b.nightly_date, b.git_version, runs."case", runs.backend,
               runs.fullgraph, runs.dynamic, runs.mode, runs.device, runs.dtype, runs.batch_size,
               runs.prompt_length, runs.status, runs.error_type, runs.graph_break_count, runs.recompile_count,
               runs.hidden_error_count, runs.compile_s, runs.eager_ms_per_token, runs.compiled_ms_per_token,
               runs.started_at
        FROM runs JOIN torch_builds b ON b.id = runs.torch_build_id""",
    )
    db.create_view(
        "latest_status",
        """
        SELECT s.* FROM run_summary s
        WHERE s.id = (SELECT MAX(r.id) FROM runs r JOIN torch_builds rb ON rb.id = r.torch_build_id
                      WHERE rb.version = s.torch_version AND r."case" = s."case" AND r.backend = s.backend
                        AND r.fullgraph = s.fullgraph AND r.dynamic = s.dynamic AND r.mode = s.mode
                        AND r.device = s.device AND r.dtype = s.dtype)""",
    )


@migration
def m003_error_key_case_path(db: sqlite_utils.Database) -> None:
    """The stable key of a run's own exception (check and compare name it across builds), and the
    case file a run used (repro rebuilds from it)."""
    db.table("runs").add_column("error_key", str)
    db.table("runs").add_column("case_path", str)


@migration
def m004_frames_and_warm_compile(db: sqlite_utils.Database) -> None:
    """Per compiled frame: torch's compilation_metrics (torch >= 2.4); and compile time with warm caches."""
    db.table("frames").create(
        {
            "id": int,
            "run_id": int,
            "compile_id": str,
            "co_name": str,
            "co_filename": str,
            "co_firstlineno": int,
            "cache_size": int,
            "accumulated_cache_size": int,
            "guard_count": int,
            "shape_env_guard_count": int,
            "graph_op_count": int,
            "graph_node_count": int,
            "graph_input_count": int,
            "entire_frame_compile_time_s": float,
            "backend_compile_time_s": float,
            "inductor_compile_time_s": float,
            "code_gen_time_s": float,
            "fail_type": str,
            "fail_reason": str,
            "restart_reasons": str,
        },
        pk="id",
        foreign_keys=[("run_id", "runs", "id")],
    )
    db.table("frames").create_index(["run_id"])
    db.table("runs").add_column("compile_warm_s", float)


@migration
def m005_invocation(db: sqlite_utils.Database) -> None:
    """Which ``diag run`` made a run: ``diag check`` on one build pools the newest invocation's runs
    of a row against the invocation's before it (NULL on older runs: each run stands alone)."""
    db.table("runs").add_column("invocation", str)


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
    conn.execute(
        "UPDATE graph_breaks SET location = CASE WHEN user_line IS NULL THEN user_file "
        "ELSE user_file || ':' || user_line END"
    )
    for column in ("user_file", "user_line"):
        conn.execute(f"ALTER TABLE graph_breaks DROP COLUMN {column}")
    conn.execute("ALTER TABLE runs ADD COLUMN case_source TEXT")
    builtin = ", ".join(f"'{name}'" for name in ("append_last", "dynamic_slice", "hf_static_cache", "hf_dynamic_cache"))
    conn.execute(f"""UPDATE runs SET case_source = CASE
        WHEN "case" IN ({builtin}) AND (case_path IS NULL OR case_path LIKE '%/cases/' || "case" || '.py')
        THEN '{rows.BUILTIN}' ELSE COALESCE(case_path, 'unknown') END""")
    for table in ("runs", *FINDING_TABLES):
        conn.execute(f"ALTER TABLE {table} ADD COLUMN extra TEXT")
    conn.execute(f"CREATE INDEX runs_row ON runs (torch_build_id, {row_columns()})")


@migration
def m007_ops_captured(db: sqlite_utils.Database) -> None:
    """How many torch calls dynamo put into graphs (its calls_captured counter): a graph that shrinks
    between builds, more of the step left to eager, shows here even where the status holds."""
    db.table("runs").add_column("ops_captured", int)


@migration
def m008_wheel_source(db: sqlite_utils.Database) -> None:
    """Where each build's torch wheel came from (a URL or a file) and its sha256, so that any build
    diag ran can be installed again and checked (diag env add --like BUILD)."""
    for column in ("wheel_url", "wheel_origin", "wheel_sha256"):
        db.table("torch_builds").add_column(column, str)


WHEEL_COLUMNS = ("wheel_url", "wheel_origin", "wheel_sha256")


@migration
def m009_timing_summaries(db: sqlite_utils.Database) -> None:
    """A timing series of an old build kept as its summary (n, median, p10, p90) once its raw
    samples are pruned (diag prune): the history stays bounded."""
    db.table("timings").add_column("summary", str)


@migration
def m010_folded_runs(db: sqlite_utils.Database) -> None:
    """Runs ``diag prune`` folded into counts: of one build, a row's runs beyond its newest (a release
    leg re-runs its build every night), and a row's runs on an old nightly where the row does not
    change. One row per build, row and outcome (status, error key and finding keys): how many runs,
    when the first and the last of them started."""
    db.table("folded_runs").create(
        {
            "id": int,
            "torch_build_id": int,
            **rows.column_types(),
            "status": str,
            "error_key": str,
            "finding_keys": str,
            "runs": int,
            "first_started_at": str,
            "last_started_at": str,
        },
        pk="id",
        foreign_keys=[("torch_build_id", "torch_builds", "id")],
    )
    db.table("folded_runs").create_index(["torch_build_id"])


@migration
def m011_timing_noise(db: sqlite_utils.Database) -> None:
    """Whether a run's latency can be trusted (diag/noise.py): the 95% interval of each mode's median
    step, and the verdict noisy with its reason. Runs stored before have none (NULL: not judged)."""
    db.table("runs").add_column("timing_noisy", int)
    db.table("runs").add_column("timing_note", str)
    for mode in ("eager", "compiled"):
        for end in ("low", "high"):
            db.table("runs").add_column(f"{mode}_ms_{end}", float)


@migration
def m012_what_diagnosis_costs(db: sqlite_utils.Database) -> None:
    """What a run cost, read from any history: each pass's wall time, the orchestrator's own work on
    the run after its probe ended, and the structured-logging overhead torch reports per frame (the
    sum, on the run; NULL where the build reports none)."""
    db.table("frames").add_column("structured_logging_overhead_s", float)
    for column in ("timing_pass_s", "diagnosis_pass_s", "orchestrator_s", "logging_overhead_s"):
        db.table("runs").add_column(column, float)


def row_columns(prefix: str = "") -> str:
    return ", ".join(f'{prefix}"{name}"' for name in rows.FIELDS)
