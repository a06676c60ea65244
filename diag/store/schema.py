"""The schema: tables, named migrations (each applied once, recorded in ``migrations``), the
Datasette views over the one row definition (what each column holds: descriptions.py)."""

from __future__ import annotations

import sqlite_utils

from diag import row as rows
from diag.contract import FINDING_TABLES
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
            **_row_types(),
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
    """Whether a run's latency can be trusted (diag/verdicts/noise.py): the 95% interval of each mode's median
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


@migration
def m013_decode_recompiles(db: sqlite_utils.Database) -> None:
    """Recompiles split at the first decode step: the prefill's apart from decode's, and on how many
    distinct decode steps decode recompiled (NULL: stored before, or never compiled)."""
    for column in ("prefill_recompiles", "decode_recompiles", "decode_recompile_steps"):
        db.table("runs").add_column(column, int)


@migration
def m014_recompile_fields(db: sqlite_utils.Database) -> None:
    """What changed in each recompile, as fields (diag/guards.py): the guard's subject, its property,
    the expected and the actual value; recompiles stored before get them from their reason."""
    from diag import guards

    for column in guards.FIELDS:
        db.table("recompiles").add_column(column, str)
    updates = [
        (*guards.parse(reason).values(), recompile_id)
        for recompile_id, reason in db.execute("SELECT id, reason FROM recompiles").fetchall()
    ]
    db.conn.executemany(
        "UPDATE recompiles SET guard_subject = ?, guard_property = ?, guard_expected = ?, guard_actual = ? "
        "WHERE id = ?",
        updates,
    )


@migration
def m015_compile_metrics(db: sqlite_utils.Database) -> None:
    """Every field of torch's per-frame compilation metrics, as JSON on the frame, and the guard check a
    decode call costs, on the run (diag/run/assemble.py, guard_latency; NULL: a build that reports none,
    or stored before)."""
    db.table("frames").add_column("metrics", str)
    db.table("runs").add_column("guard_latency_us", float)


@migration
def m016_second_call(db: sqlite_utils.Database) -> None:
    """What a second compiled generation right after the first recompiled, and how it failed if it
    did (NULL: stored before, or the first call did not compile)."""
    db.table("runs").add_column("second_call_recompiles", int)
    db.table("runs").add_column("second_call_error", str)


@migration
def m017_races(db: sqlite_utils.Database) -> None:
    """Variants raced in one probe (diag race): a row per variant against the race's baseline, with
    the row's fields (the variant's case and the config), the verdict and the paired samples."""
    text: tuple[str, ...] = ("baseline", "baseline_source", "python", "transformers_version", "verdict", "failed")
    text += ("error_type",)
    text += ("error_message", "error_location", "samples")
    numbers = ("ms_baseline", "ms_case", "ratio", "low", "high", "load_1m", "seconds")
    db.table("races").create(
        {
            "id": int,
            "uid": str,
            "torch_build_id": int,
            "started_at": str,
            **_row_types(),
            **dict.fromkeys(text, str),
            **dict.fromkeys(("rounds", "threads", "cpus"), int),
            **dict.fromkeys(numbers, float),
        },
        pk="id",
        foreign_keys=[("torch_build_id", "torch_builds", "id")],
    )
    db.table("races").create_index(["torch_build_id"])
    db.table("races").create_index(["uid", "case"], unique=True)


@migration
def m018_build_stamps(db: sqlite_utils.Database) -> None:
    """Per build, a stamp that every write touching the build replaces with a random number (the
    triggers of ``stamps.stamp_triggers``): a render compares it with the stamp its pages were made from to
    know which builds' runs changed since, without reading them (report/inputs.py). Random, not a
    count: two copies of one DB written apart never come to the same stamps."""
    db.execute("CREATE TABLE build_stamps (torch_build_id INTEGER PRIMARY KEY, stamp INTEGER NOT NULL)")
    db.execute("INSERT INTO build_stamps SELECT id, random() FROM torch_builds")


@migration
def m019_compile_cpu(db: sqlite_utils.Database) -> None:
    """The CPU time of a run's cold compile beside its wall time, and whether the compile waited for a
    busy machine (diag/verdicts/noise.py: compile_noise), with the reason. NULL: stored before, not judged."""
    db.table("runs").add_column("compile_cpu_s", float)
    db.table("runs").add_column("compile_noisy", int)
    db.table("runs").add_column("compile_note", str)


@migration
def m020_decode_step_span(db: sqlite_utils.Database) -> None:
    """The last decode step a grouped graph break or hidden error happened at, beside the first
    (decode_step): one row for a break at the prefill and at every decode step says both. NULL:
    stored before."""
    for table in ("graph_breaks", "hidden_errors"):
        db.table(table).add_column("last_decode_step", int)


@migration
def m021_compile_instructions(db: sqlite_utils.Database) -> None:
    """Instructions the cold compile executed (--count-instructions), how counted, why none. NULL: not asked."""
    db.table("runs").add_column("compile_instructions", int)
    db.table("runs").add_column("instructions_method", str)
    db.table("runs").add_column("instructions_note", str)


@migration
def m022_case_note(db: sqlite_utils.Database) -> None:
    """What the case said about how it ran (an hf case's fallback from the static cache); NULL: nothing."""
    db.table("runs").add_column("case_note", str)


@migration
def m023_between_steps(db: sqlite_utils.Database) -> None:
    """A compiled decode step's host time outside the compiled calls (median, ms), per run and per raced
    variant; a race's breakdown by op group (JSON, --profile). NULL: stored before, not timed or profiled."""
    db.table("runs").add_column("compiled_between_ms", float)
    for column, kind in (("between_ms_baseline", float), ("between_ms_case", float), ("profile", str)):
        db.table("races").add_column(column, kind)


def _row_types() -> dict[str, type]:  # the row's columns (diag/row.py) and their types
    whole = {"fullgraph", "batch_size", "prompt_length", "new_tokens"}
    return {name: int if name in whole else str for name in rows.FIELDS}


def row_columns(prefix: str = "") -> str:
    return ", ".join(f'{prefix}"{name}"' for name in rows.FIELDS)


@migration
def m024_compile_stall(db: sqlite_utils.Database) -> None:
    """The seconds of a run's cold compile in which some task waited for a CPU it was ready to run on
    (Linux PSI): the compile shared the cores. NULL: stored before, or a kernel without PSI."""
    db.table("runs").add_column("compile_stall_s", float)
