"""What each table and column holds, for people: Datasette's metadata and docs/data-model.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import sqlite_utils

DESCRIPTIONS: dict[str, tuple[str, dict[str, str]]] = {
    "torch_builds": (
        "One torch build: version, git commit and variant; the wheel it came from when diag installed it.",
        {
            "build_key": "commit (or version when unknown) | variant: two dated nightlies of one commit are one build",
            "version": "torch.__version__",
            "git_version": "torch.version.git_version",
            "nightly_date": "the date in a nightly's version (YYYY-MM-DD)",
            "variant": "cpu, cu126, ...",
            "wheel_url": "where the installed wheel came from",
            "wheel_sha256": "the installed wheel's sha256",
            "cuda_version": "torch.version.cuda (NULL: a CPU build)",
            "first_seen": "when diag first stored a run of this build (UTC)",
            "wheel_origin": "how the wheel was found: given, find-links, wheel cache, index or direct URL",
        },
    ),
    "runs": (
        "One `diag run` of one case on one build: the row's fields, status, counts, timings and environment.",
        {
            "uid": "the run's own id, the same in every DB it is merged into",
            "config": "the probe's whole config, as JSON",
            "status": "the run's one status (see `diag statuses`)",
            "error_type": "the compile's exception type, when it failed",
            "error_key": "stable key of that exception",
            "error_message": "its message (the start of it once pruned)",
            "error_location": "the line of the case's code it points at (file:line)",
            "traceback": "its traceback (the start of it once pruned)",
            "graph_count": "graphs dynamo compiled (its unique_graphs counter; 0: the frames ran eagerly)",
            "ops_captured": "torch calls dynamo put into graphs (its calls_captured counter)",
            "graph_break_count": "graph breaks, each counted as often as it happened (NULL: nothing was compiled)",
            "recompile_count": "recompiles dynamo logged",
            "prefill_recompiles": "of them, before the first decode step (the prefill's shapes)",
            "decode_recompiles": "of them, during decode steps",
            "decode_recompile_steps": "distinct decode steps that recompiled: a cache that compiles once has 0 or 1",
            "second_call_recompiles": "recompiles of a second compiled generation right after the first "
            "(same prompt and sizes): a decode step that compiles once has 0",
            "second_call_error": "how that second generation failed, if it did",
            "hidden_error_count": "exceptions torch swallowed or logged",
            "compile_s": "compile time, cold caches (s)",
            "compile_warm_s": "compile time, warm caches (s)",
            "compile_cpu_s": "CPU time of the cold compile, the probe's and its compiler processes' (s)",
            "compile_stall_s": "seconds of the cold compile in which some task waited for a CPU (Linux PSI; s)",
            "environment": "the environment it ran in (environments.digest): Python, CUDA, driver, packages",
            "code_digest": "a digest of the code it compiled: each graph's, in the order compiled (inductor's output "
            "code, else dynamo's graph), comments, paths and symbol numbers left out",
            "code_note": "what code_digest was made of (how many graphs, whose code), or why there is none",
            "compile_noisy": "1: the compile waited for a busy machine and gives no verdict (NULL: not judged)",
            "compile_note": "why the compile time is noisy, in plain words",
            "compile_instructions": "instructions the cold compile executed (--count-instructions): the "
            "first compiled generation, in the probe's process",
            "instructions_method": "how they were counted: perf (the CPU's counter, least of 5) or callgrind",
            "instructions_note": "why a run that asked for a count has none",
            "case_note": "what the case said about how it ran, where that is not what its name promises "
            "(a fallback it took, and why)",
            "guard_latency_us": "guard check a steady decode call pays (us): each compiled frame's newest "
            "cache entry, as torch measured it, summed",
            "eager_ms_per_token": "median eager decode step (ms)",
            "compiled_ms_per_token": "median compiled decode step (ms)",
            "compiled_between_ms": "median compiled decode step's host time outside the compiled calls and "
            "diag's own recording of the step (ms): the loop's work between the compiled regions",
            "eager_ms_low": "95% interval of the eager median, low end (ms)",
            "compiled_ms_high": "95% interval of the compiled median, high end (ms)",
            "eager_ms_high": "95% interval of the eager median, high end (ms)",
            "compiled_ms_low": "95% interval of the compiled median, low end (ms)",
            "peak_mem_eager_mb": "peak memory of the eager generations, as memory_kind says (MB)",
            "peak_mem_compiled_mb": "peak memory of the compiled generations, as memory_kind says (MB)",
            "tokens_equal": "1: the compiled tokens equal eager's",
            "max_abs_diff": "largest difference between compiled and eager logits",
            "first_differing_step": "the first decode step whose token differs from eager's",
            "eager_margin": "eager's top-2 logit margin at that step: within the tolerance, a tie, not a mismatch",
            "oracle_equal": "1: eager's tokens equal transformers' own generate (NULL: the case has no reference)",
            "capabilities": "JSON: which collectors ran on this torch, and why any could not",
            "counters": "JSON: dynamo's counters after the diagnosis pass",
            "timing_error": "the compile error the timing pass saw, where the diagnosis pass died after it",
            "torch_version": "torch.__version__ as the probe saw it",
            "depyf_version": "depyf in the run's environment, where installed",
            "platform": "the probe's platform (platform.platform())",
            "device_name": "the device's name (a CPU model or a GPU's)",
            "host": "the machine's name",
            "started_at": "when the run started (UTC)",
            "duration_s": "wall time of the whole run, probe and storing (s)",
            "tool_version": "the diag that made the run",
            "artifacts_dir": "the run's directory: logs, trace, tlparse report, depyf output",
            "exit_code": "the diagnosis pass's exit status",
            "signal": "the signal that ended the probe, where one did",
            "stderr_tail": "the end of the probe's stderr",
            "case_path": "the case's file as the probe loaded it",
            "timing_noisy": "1: the latency figures are noisy and give no verdict (NULL: not judged)",
            "timing_note": "why the timing is noisy, in plain words",
            "timing_pass_s": "wall time of the timing pass (s)",
            "diagnosis_pass_s": "wall time of the diagnosis pass, DEBUG logging on (s)",
            "orchestrator_s": "the orchestrator's work on the run after its probe ended: trace, tlparse, assembly (s)",
            "logging_overhead_s": "structured-logging overhead torch reports, summed over frames, where it does (s)",
            "memory_kind": "how peak memory was measured: rss_rise, cuda_max_allocated, rss_high_water (older runs)",
            "invocation": "the `diag run` that made this run (repeats share it)",
            "transformers_version": "transformers in the run's environment",
            "python": "the run's Python",
        },
    ),
    "graph_breaks": (
        "Graph breaks per run, one row per distinct break (key) with how often it happened.",
        {
            "key": "stable across builds: gb_type or the normalised reason",
            "gb_type": "torch's graph-break type (2.8+)",
            "resumable": "1: dynamo resumed after the break",
            "reason": "torch's words for the break",
            "decode_step": "the decode step it first happened at (-1: the prefill; empty: not known)",
            "last_decode_step": "the decode step it last happened at (the same where all its events were in one)",
            "count": "how often it happened in the run",
            "location": "the line of the case's code it happened at (file:line)",
        },
    ),
    "recompiles": (
        "Recompiles per run, with the guard that failed.",
        {
            "reason": "the failed guard",
            "decode_step": "the decode step that triggered it (-1: the prefill; empty: not known)",
            "guard_failures": "guards that failed on it",
            "guard_subject": "what the failed guard checked: an input or attribute (attention_mask, kwargs['x'])",
            "guard_property": "size[1], stride[0], dtype, id, type, value, item, len, ...",
            "guard_expected": "the value the compiled code was made for",
            "guard_actual": "the value this call had, where torch says it",
            "key": "stable across builds: the failed guard, normalised",
            "function": "the function that was compiled again",
            "location": "where that function is (file:line)",
        },
    ),
    "hidden_errors": (
        "Exceptions torch caught or logged while compiling: visible only in DEBUG logs.",
        {
            "source": "where it was caught: log, exception hook, timing_pass, recompile_limit, ...",
            "logger": "the logger that reported it",
            "key": "stable across builds: exception type and normalised message",
            "exc_type": "the exception's type",
            "message": "its message",
            "location": "the line of the case's code it points at (file:line)",
            "traceback": "its traceback, where torch logged one",
            "decode_step": "the decode step it first happened at (-1: the prefill; empty: not known)",
            "last_decode_step": "the decode step it last happened at (the same where all its events were in one)",
            "count": "how often it happened in the run",
        },
    ),
    "timings": (
        "Timing series per run: raw samples for recent builds, a summary after `diag prune`.",
        {
            "samples": "JSON list of samples (NULL once pruned)",
            "summary": "JSON n, median, p10, p90 of pruned samples",
            "mode": "eager or compiled",
            "metric": "decode_step, generation, host_reference, ...",
            "unit": "the samples' unit (s)",
        },
    ),
    "frames": (
        "Per compiled frame, torch's compilation_metrics (torch 2.4+).",
        {
            "metrics": "every field torch's in-process compilation metrics hold for the frame, as JSON (torch "
            "2.3+); a field over 512 characters (the config dumps) as its sha256 and length, whole in the run "
            "directory's diagnose.jsonl",
            "compile_id": "torch's compile id of the frame (frame/attempt)",
            "co_name": "the compiled function's name",
            "co_filename": "its file",
            "co_firstlineno": "its first line",
            "cache_size": "compiled entries of this code object at the time",
            "accumulated_cache_size": "compiled entries of this code object, counted over the run",
            "guard_count": "guards on the compiled entry",
            "shape_env_guard_count": "of them, guards on symbolic shapes",
            "graph_op_count": "ops in the captured graph",
            "graph_node_count": "nodes in the captured graph",
            "graph_input_count": "inputs of the captured graph",
            "entire_frame_compile_time_s": "the frame's whole compile (s)",
            "backend_compile_time_s": "of it, the backend's (s)",
            "inductor_compile_time_s": "of it, inductor's (s)",
            "code_gen_time_s": "of it, inductor's code generation (s)",
            "fail_type": "the exception that failed the frame's compile, where one did",
            "fail_reason": "its message",
            "restart_reasons": "why dynamo restarted its analysis of the frame",
            "structured_logging_overhead_s": "what torch's structured logging cost the frame (s)",
        },
    ),
    "folded_runs": (
        "Runs `diag prune` folded into counts, by build, row and outcome: a row's runs of one build "
        "beyond its newest, and a row's runs on old nightlies where it does not change.",
        {
            "runs": "how many runs were folded",
            "status": "their status",
            "error_key": "their error's stable key",
            "finding_keys": "the keys of what they found (graph breaks, recompiles, hidden errors), as text",
            "first_started_at": "when the first of them started",
            "last_started_at": "when the last of them started",
        },
    ),
    "races": (
        "Variants raced in one probe (`diag race`): one row per variant against the race's first case, "
        "timed in rounds of one compiled generation each, the order reversed every other round.",
        {
            "uid": "the race: its rows share it, one per variant after the baseline",
            "case": "the variant",
            "baseline": "the race's first case, which each variant is set against",
            "rounds": "rounds whose two generations were both timed",
            "ms_baseline": "median over rounds of the baseline's median decode step (ms)",
            "ms_case": "the same for the variant (ms)",
            "ratio": "median over rounds of the variant's median decode step over the baseline's in the round",
            "low": "95% interval of that median, low end",
            "high": "95% interval of that median, high end",
            "verdict": "slower, faster, no difference, noisy, too few rounds, or not raced",
            "failed": "not raced: the case that failed to build or compile",
            "samples": "JSON: each round's median decode step (s) of the baseline and of the variant",
            "started_at": "when the race started (UTC)",
            "baseline_source": "builtin, or the path of the baseline's case file",
            "python": "the race's Python",
            "transformers_version": "transformers in the race's environment",
            "error_type": "the exception of the case that was not raced",
            "error_message": "its message",
            "error_location": "the line of the case's code it points at (file:line)",
            "threads": "torch intra-op threads the race ran with",
            "cpus": "CPUs the race could use",
            "load_1m": "the host's load average over the minute before the race",
            "seconds": "how long the variants were timed, each (s)",
            "between_ms_baseline": "median over the baseline's decode steps of the host time outside its "
            "compiled calls (ms)",
            "between_ms_case": "the same for the variant (ms)",
            "profile": "JSON (diag race --profile): per op group, the variant's and the baseline's time per "
            "decode token and their difference with its interval over the profiled rounds, ranked; the SDPA "
            "kernels each ran",
        },
    ),
    "environments": (
        "Each environment a run ran in, stored once: what `diag env-diff` sets side by side and what "
        "`diag check` names beside a regression where a package other than torch moved.",
        {
            "digest": "the environment's key: a digest of the fields below",
            "python": "the interpreter's version",
            "cuda_version": "the CUDA torch was built with; NULL on a CPU build",
            "driver_version": "the NVIDIA kernel driver loaded on the machine; NULL where none is",
            "packages": "JSON: every installed distribution, by its normalised name: its version",
        },
    ),
    "bisects": (
        "Each `diag bisect`'s answer: what `diag check --alerts` links beside a cause of the same row.",
        {
            "started_at": "when the bisect started (UTC)",
            "row": "the row it searched (its label)",
            "signal": "what it judged a build on (--on): status, key:KEY, count:NAME",
            "moved": "torch, or the package it moved with torch held",
            "last_good": "the last build (or release) that agreed with the good end",
            "first_bad": "the first that differed",
            "commit_range": "the changes between the two (git log form)",
            "reproduce": "the one command that runs the first bad build's row again",
            "summary": "JSON: everything the bisect printed with --json",
        },
    ),
    "build_stamps": (
        "Per build, a stamp that SQLite triggers replace with a random number at every insert, update "
        "or delete touching the build (its runs, what they found, its races, its own row): what `diag "
        "report` compares to know which builds changed since its last render.",
        {"stamp": "a random number, replaced at each write touching the build"},
    ),
    "migrations": (
        "The schema migrations applied to this DB, by name (diag/store/schema.py, schema_added.py).",
        {"name": "the migration's function", "applied_at": "when it was applied (UTC)"},
    ),
    "run_summary": ("Every run with its build's version: the table to filter and facet.", {}),
    "latest_status": ("The newest run of each row on each build: the report's matrix as a table.", {}),
}


# The row (diag/row.py): in runs, folded_runs and races alike.
ROW = {
    "case": "case name",
    "case_source": "builtin, or the path of the user's case file",
    "backend": "torch.compile backend",
    "fullgraph": "1: torch.compile(fullgraph=True)",
    "dynamic": "torch.compile dynamic=: auto (None), true or false",
    "mode": "torch.compile mode (default, reduce-overhead, max-autotune, ...)",
    "device": "cpu, cuda or cuda:N",
    "dtype": "the model's dtype",
    "batch_size": "prompts in the batch",
    "prompt_length": "prompt tokens",
    "new_tokens": "tokens generated (the prefill emits the first)",
    "model": "the checkpoint's path, or tiny-random",
}
SHARED = {
    "id": "the row's id in this DB",
    "run_id": "the run (runs.id) it belongs to",
    "torch_build_id": "the build (torch_builds.id) it ran on",
    "extra": "JSON: fields the probe recorded that this diag has no column for",
}


def column_descriptions(table: str, columns: list[str]) -> dict[str, str]:
    """What each column of ``table`` holds: the table's own words, else the row's, else the shared ones."""
    own = DESCRIPTIONS.get(table, ("", {}))[1]
    return {name: own.get(name) or ROW.get(name) or SHARED.get(name, "") for name in columns}


def schema_markdown() -> str:
    """Every table of a DB migrated from blank, each column with its type and what it holds: the
    schema section of docs/data-model.md (written by cog; a test fails where it is stale)."""
    import tempfile

    from diag.store.connection import open_db

    with tempfile.TemporaryDirectory() as folder:
        db = open_db(Path(folder) / "schema.db")
        lines = []
        for table in db.table_names():
            lines += [f"### {table}", "", DESCRIPTIONS.get(table, ("",))[0], "", "| column | type | holds |"]
            lines.append("|---|---|---|")
            columns = {column.name: column.type for column in db[table].columns}
            described = column_descriptions(table, list(columns))
            lines += [f"| {name} | {kind} | {described[name]} |" for name, kind in columns.items()]
            lines.append("")
        db.conn.close()
    return "\n".join(lines)


def datasette_metadata(db: sqlite_utils.Database, name: Optional[str] = None) -> dict[str, Any]:
    """Datasette metadata for ``db``: table and column descriptions, builds labelled by version.
    Datasette names a database after its file's stem: ``name``, or the stem of ``db``'s file."""
    path = next((row[2] for row in db.execute("PRAGMA database_list") if row[1] == "main"), "") or "history.db"
    tables = {}
    present = set(db.table_names()) | set(db.view_names())
    for table, (description, _) in DESCRIPTIONS.items():
        names = [column.name for column in db[table].columns] if table in present else []
        tables[table] = {"description": description, "columns": column_descriptions(table, names)}
    tables["torch_builds"]["label_column"] = "version"
    tables["runs"]["label_column"] = "case"
    return {
        "title": "diag: torch.compile diagnostics across torch builds",
        "description": "Open with `datasette DB -m datasette.json` (the file the report writes).",
        "databases": {name or Path(path).stem: {"tables": tables}},
    }
