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
        },
    ),
    "runs": (
        "One `diag run` of one case on one build: the row's fields, status, counts, timings and environment.",
        {
            "case": "case name",
            "case_source": "builtin, or the path of the user's case file",
            "fullgraph": "1: torch.compile(fullgraph=True)",
            "status": "the run's one status (see `diag statuses`)",
            "error_type": "the compile's exception type, when it failed",
            "error_key": "stable key of that exception",
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
            "guard_latency_us": "guard check a steady decode call pays (us): each compiled frame's newest "
            "cache entry, as torch measured it, summed",
            "eager_ms_per_token": "median eager decode step (ms)",
            "compiled_ms_per_token": "median compiled decode step (ms)",
            "eager_ms_low": "95% interval of the eager median, low end (ms)",
            "compiled_ms_high": "95% interval of the compiled median, high end (ms)",
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
        },
    ),
    "recompiles": (
        "Recompiles per run, with the guard that failed.",
        {
            "reason": "the failed guard",
            "decode_step": "the decode step that triggered it",
            "guard_failures": "guards that failed on it",
            "guard_subject": "what the failed guard checked: an input or attribute (attention_mask, kwargs['x'])",
            "guard_property": "size[1], stride[0], dtype, id, type, value, item, len, ...",
            "guard_expected": "the value the compiled code was made for",
            "guard_actual": "the value this call had, where torch says it",
        },
    ),
    "hidden_errors": (
        "Exceptions torch caught or logged while compiling: visible only in DEBUG logs.",
        {
            "source": "where it was caught: log, exception hook, timing_pass, recompile_limit, ...",
            "logger": "the logger that reported it",
        },
    ),
    "timings": (
        "Timing series per run: raw samples for recent builds, a summary after `diag prune`.",
        {"samples": "JSON list of samples (NULL once pruned)", "summary": "JSON n, median, p10, p90 of pruned samples"},
    ),
    "frames": (
        "Per compiled frame, torch's compilation_metrics (torch 2.4+).",
        {
            "metrics": "every field torch's in-process compilation metrics hold for the frame, as JSON (torch "
            "2.3+); a field over 512 characters (the config dumps) as its sha256 and length, whole in the run "
            "directory's diagnose.jsonl"
        },
    ),
    "folded_runs": (
        "Runs `diag prune` folded into counts, by build, row and outcome: a row's runs of one build "
        "beyond its newest, and a row's runs on old nightlies where it does not change.",
        {
            "runs": "how many runs were folded",
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
        },
    ),
    "build_stamps": (
        "Per build, a stamp that SQLite triggers replace with a random number at every insert, update "
        "or delete touching the build (its runs, what they found, its races, its own row): what `diag "
        "report` compares to know which builds changed since its last render.",
        {"stamp": "a random number, replaced at each write touching the build"},
    ),
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
    return {
        "title": "diag: torch.compile diagnostics across torch builds",
        "description": "Open with `datasette DB -m datasette.json` (the file the report writes).",
        "databases": {name or Path(path).stem: {"tables": tables}},
    }
