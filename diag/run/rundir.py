"""A run directory, read: the spec the orchestrator wrote, and what each pass left behind.

A run directory holds everything a run is made of, so that ``assemble`` can build the
stored run from it alone (the tests replay recorded run directories this way):

    spec.json            the case, where it came from, its config, and the run's identity
    probe.jsonl          how the probe process ended, as the orchestrator saw it (an exit record)
    passes.jsonl         how each pass ended, as the probe saw it (exit records)
    time.jsonl           the timing pass's records        time.stderr.txt
    diagnose.jsonl       the diagnosis pass's records     diagnose.stderr.txt
    trace/, tlparse/, depyf/, torch_debug.log   the collectors' artifacts
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from diag.contract import record_types, records, statuses

STDERR_TAIL_BYTES = 4000  # stored with a run
STDERR_READ_BYTES = 64000  # read from a pass's stderr, for the tracebacks in it
PROBE_OUTPUT = "run"  # the probe process's stdout and stderr: run.stdout.txt, run.stderr.txt
PROBE_EXIT = "probe.jsonl"
PASS_EXITS = "passes.jsonl"
SPEC = "spec.json"


@dataclass
class PassOutcome(record_types.ByKind):
    """How one pass ended and what it wrote, its records typed by kind (``first``, ``all``)."""

    returncode: Optional[int]
    signal: Optional[int]
    timed_out: bool
    duration_s: float
    stderr_tail: str
    records: list[records.JSONObject] = field(default_factory=list)
    unreadable_lines: int = 0
    oom_kills: Optional[int] = None  # processes the kernel's OOM killer ended while it ran


@dataclass
class RunFiles:
    directory: Path
    spec: dict[str, Any]
    diagnosis: PassOutcome
    timing: Optional[PassOutcome]  # None: the run had no timing pass
    probe_exit: record_types.ExitRecord
    count: Optional[PassOutcome] = None  # None: the run did not count instructions


def tail(path: Path, size: int = STDERR_READ_BYTES) -> str:
    if not path.exists():
        return ""
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - size))
        return handle.read().decode("utf-8", "replace")


def pass_outcome(
    run_dir: Path, name: str, exits: list[record_types.ExitRecord], probe_exit: record_types.ExitRecord
) -> PassOutcome:
    """What one pass left: its exit as the probe recorded it, else (the probe itself died or hung
    before recording it) the probe's own exit; its results file and stderr either way."""
    exit_record = next((r for r in exits if r.get("name") == name), None)
    found, bad = records.read(run_dir / f"{name}.jsonl")
    stderr = tail(run_dir / f"{name}.stderr.txt")
    if exit_record is not None:
        return PassOutcome(
            exit_record["returncode"],
            exit_record["signal"],
            exit_record["timed_out"],
            exit_record["duration_s"],
            stderr,
            found,
            bad,
            exit_record.get("oom_kills"),
        )
    probe_stderr = tail(run_dir / f"{PROBE_OUTPUT}.stderr.txt")
    return PassOutcome(
        probe_exit.get("returncode"),
        probe_exit.get("signal"),
        bool(probe_exit.get("timed_out")),
        float(probe_exit.get("duration_s") or 0.0),
        "\n".join(t for t in (probe_stderr, stderr) if t),
        found,
        bad,
        probe_exit.get("oom_kills"),
    )


def load(run_dir: Path) -> RunFiles:
    """The run directory's spec and pass outcomes."""
    spec = json.loads((run_dir / SPEC).read_text(encoding="utf-8"))
    probe_exit = record_types.Found(records.read(run_dir / PROBE_EXIT)[0]).first(records.EXIT) or {}
    exits = record_types.Found(records.read(run_dir / PASS_EXITS)[0]).all(records.EXIT)
    diagnosis = pass_outcome(run_dir, "diagnose", exits, probe_exit)
    timed = spec.get("timing", True)
    timing = pass_outcome(run_dir, "time", exits, probe_exit) if timed else None
    counted = bool(spec.get("config", {}).get("count_instructions"))
    count = pass_outcome(run_dir, "count", exits, probe_exit) if counted else None
    return RunFiles(run_dir, spec, diagnosis, timing, probe_exit, count)


SIGKILL = 9  # what the kernel's OOM killer sends


def probe_failure(outcome: PassOutcome) -> Optional[dict[str, Any]]:
    """Status fields when the probe died, hung or wrote no verdict; None when it finished."""
    if outcome.timed_out:
        return {
            "status": statuses.TIMEOUT,
            "error_type": "Timeout",
            "error_message": f"probe exceeded its time limit after {outcome.duration_s:.0f}s",
        }
    if outcome.signal:
        if outcome.signal == SIGKILL and outcome.oom_kills:
            # the kernel says it ended a process for want of memory while this one ran
            return {
                "status": statuses.CRASH,
                "error_type": "OutOfMemory",
                "signal": outcome.signal,
                "error_message": f"probe killed by signal {outcome.signal}: out of memory (the kernel's OOM "
                f"killer ended {outcome.oom_kills} process{'es' if outcome.oom_kills > 1 else ''} while it ran)",
            }
        return {
            "status": statuses.CRASH,
            "error_type": "Signal",
            "signal": outcome.signal,
            "error_message": f"probe killed by signal {outcome.signal}",
        }
    if outcome.first(records.RESULT) is None:
        detail = f"; {outcome.unreadable_lines} unreadable result lines" if outcome.unreadable_lines else ""
        return {
            "status": statuses.CRASH,
            "error_type": "ProbeExit",
            "error_message": f"probe exited with code {outcome.returncode} without a verdict{detail}",
        }
    return None
