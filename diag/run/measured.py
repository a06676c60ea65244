"""What the timing and count passes measured, as run columns: the timing rows, latency and compile
time with their noise verdicts, the compile's instruction count, and why a pass gave none. Pure: no I/O.

``assemble.py`` puts these beside the diagnosis's columns.
"""

from __future__ import annotations

import json
from typing import Optional, Union, cast

from diag import noise
from diag.config import SQLITE_INTEGER_MAX
from diag.contract import record_types, records
from diag.run.rundir import PassOutcome, probe_failure
from diag.store.typed import RunRow, TimingRow


def _timing(outcome: Optional[PassOutcome], mode: str) -> Optional[record_types.TimingRecord]:
    if outcome is None:
        return None
    return next((r for r in outcome.all(records.TIMING) if r.get("mode") == mode), None)


def timing_rows(outcome: Optional[PassOutcome]) -> list[TimingRow]:
    """The raw samples of each mode: decode steps, whole generations, and the host reference."""
    found: list[TimingRow] = []
    for mode in ("eager", "compiled"):
        timing = _timing(outcome, mode)
        if timing is None:
            continue
        for metric, samples in (
            ("decode_step", timing.get("step_samples_s")),
            ("generation", timing.get("totals_s")),
            ("host_reference", timing.get("host_samples_s")),
            ("between_step", timing.get("between_samples_s")),
        ):
            if samples:
                found.append({"mode": mode, "metric": metric, "unit": "s", "samples": json.dumps(samples)})
    return found


def timing_columns(outcome: Optional[PassOutcome], device: Optional[str] = None) -> RunRow:
    eager, compiled = _timing(outcome, "eager") or {}, _timing(outcome, "compiled") or {}
    last = compiled or eager
    sides = (("eager", eager), ("compiled", compiled))
    judged = noise.assess(
        {mode: timing.get("step_samples_s") or [] for mode, timing in sides},
        last.get("load_1m"),
        last.get("cpus"),
        {mode: timing.get("host_samples_s") or [] for mode, timing in sides},
    )
    bounds = {
        f"{mode}_ms_{end}": judged.intervals[mode][i] if mode in judged.intervals else None
        for mode in ("eager", "compiled")
        for i, end in enumerate(("low", "high"))
    }
    return {
        "timing_noisy": int(judged.noisy) if judged.intervals else None,
        "timing_note": judged.note,
        **cast(RunRow, bounds),  # eager_ms_low ... compiled_ms_high
        "compile_s": compiled.get("compile_s"),
        "compile_warm_s": compiled.get("compile_warm_s"),
        **_compile_noise(compiled, device),
        "eager_ms_per_token": eager.get("median_ms_per_token"),
        "compiled_ms_per_token": compiled.get("median_ms_per_token"),
        "compiled_between_ms": compiled.get("median_between_ms"),
        "peak_mem_eager_mb": eager.get("peak_memory_mb"),
        "peak_mem_compiled_mb": compiled.get("peak_memory_mb"),
        "memory_kind": eager.get("memory_kind"),
    }


def _compile_noise(compiled: record_types.TimingRecord, device: Optional[str]) -> RunRow:
    """The compile's CPU time, and whether its wall time waited for the machine (noise.compile_noise)."""
    wall, cpu, stall = compiled.get("compile_s"), compiled.get("compile_cpu_s"), compiled.get("compile_stall_s")
    note = noise.compile_noise(wall, cpu, device, compiled.get("load_1m"), compiled.get("cpus"), stall)
    judged = wall is not None and (cpu is not None or stall is not None) and (device or "cpu") == "cpu"
    return {
        "compile_cpu_s": cpu,
        "compile_stall_s": stall,
        "compile_noisy": int(note is not None) if judged else None,
        "compile_note": note,
    }


def instruction_columns(count: Optional[PassOutcome]) -> RunRow:
    """The cold compile's instruction count (the count pass, diag/probe/instructions.py), its method,
    and why a run that asked for one has none: no method on the host, the pass failed, or the
    compile did."""
    if count is None:
        return {"compile_instructions": None, "instructions_method": None, "instructions_note": None}
    found = count.all(records.INSTRUCTIONS)
    method = next((r["method"] for r in reversed(found) if r.get("method")), None)
    number = next((r["count"] for r in reversed(found) if r.get("count") is not None), None)
    note = None
    if number is not None and not 0 <= number <= SQLITE_INTEGER_MAX:  # what the pass wrote is read, not trusted
        return {
            "compile_instructions": None,
            "instructions_method": method,
            "instructions_note": f"the count pass gave {str(number)[:40]} instructions, which is no count "
            f"(beyond 0 to 2^63-1, what the DB holds)",
        }
    if number is None:
        error = count.first(records.TIMING_ERROR) or count.first(records.RESULT)
        said = next((r["note"] for r in reversed(found) if r.get("note")), None)
        if error is not None and error.get("error_type"):
            said = f"the counted compile failed: {_error_text(error)}"
        elif said is None and count.timed_out:
            said = f"the count pass exceeded its time limit after {count.duration_s:.0f}s"
        elif said is None and count.signal:
            said = f"the count pass was killed by signal {count.signal}"
        last = next((line.strip() for line in reversed(count.stderr_tail.splitlines()) if line.strip()), "")
        note = said or f"the count pass exited with code {count.returncode} without a count" + (
            f": {last[:300]}" if last else ""
        )
    return {"compile_instructions": number, "instructions_method": method, "instructions_note": note}


def timing_error(outcome: Optional[PassOutcome], compiled_expected: bool = True) -> Optional[str]:
    """Why the timing pass gave no (or partial) timings; None when it finished.

    Where the diagnosis says the case does not compile, the timing pass's compile failure is
    that same failure, already the run's own error, and not repeated here.
    """
    if outcome is None:
        return None
    failed = outcome.first(records.TIMING_ERROR)
    if failed is not None and failed.get("mode") == "compiled" and not compiled_expected:
        failed = None
    error = failed or outcome.first(records.RESULT)
    if error is not None:
        return _error_text(error)
    if outcome.timed_out or outcome.signal or outcome.first(records.TIMING) is None:
        failure = probe_failure(outcome)
        if failure is not None:
            return failure["error_message"] + (f"\n{outcome.stderr_tail[-1000:]}" if outcome.stderr_tail else "")
    return None


def timing_compile_error(outcome: Optional[PassOutcome]) -> Optional[str]:
    """The timing pass's compile error, for a run whose diagnosis died: what torch said, kept."""
    error = outcome.first(records.TIMING_ERROR) if outcome is not None else None
    return f"timing pass: {_error_text(error)}" if error is not None else None


def _error_text(error: Union[record_types.TimingErrorRecord, record_types.ResultRecord]) -> str:
    where = f" (at {error['error_location']})" if error.get("error_location") else ""
    return f"{error.get('error_type')}: {error.get('error_message')}{where}"
