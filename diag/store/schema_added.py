"""The migrations after m012: what runs, their findings and races gained since the first schema
(schema.py holds the tables as first made). Each is applied once, in the order of its name, after
schema.py's (migrations.py)."""

from __future__ import annotations

import sqlite_utils

from diag import row as rows
from diag.store.migrations import migration


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
            **rows.column_types(),
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
    busy machine (diag/noise.py: compile_noise), with the reason. NULL: stored before, not judged."""
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


@migration
def m024_compile_stall(db: sqlite_utils.Database) -> None:
    """The seconds of a run's cold compile in which some task waited for a CPU it was ready to run on
    (Linux PSI): the compile shared the cores. NULL: stored before, or a kernel without PSI."""
    db.table("runs").add_column("compile_stall_s", float)


@migration
def m025_environments(db: sqlite_utils.Database) -> None:
    """Each environment a run ran in, stored once (keyed by a digest of what it holds): Python, CUDA,
    the GPU driver and every installed distribution with its version; a run names its environment.
    NULL: stored before, or by a probe that did not list its distributions."""
    db.table("environments").create(
        {"digest": str, "python": str, "cuda_version": str, "driver_version": str, "packages": str}, pk="digest"
    )
    db.table("runs").add_column("environment", str)


@migration
def m026_bisects(db: sqlite_utils.Database) -> None:
    """Each bisect's answer, as it printed it: the row it searched, the signal, what moved, the ends,
    the first bad build and the command that reproduces it, and the whole summary (JSON)."""
    db.table("bisects").create(
        {
            "id": int,
            "started_at": str,
            "row": str,
            "signal": str,
            "moved": str,
            "last_good": str,
            "first_bad": str,
            "commit_range": str,
            "reproduce": str,
            "summary": str,
        },
        pk="id",
    )


@migration
def m027_code_digest(db: sqlite_utils.Database) -> None:
    """A digest of the code each run compiled (its graphs', in the order compiled, from the structured
    trace: inductor's output code, else dynamo's graph), and what was hashed or why nothing was: the
    signal of a bisect on the generated code changing. NULL: stored before, or no trace."""
    db.table("runs").add_column("code_digest", str)
    db.table("runs").add_column("code_note", str)
