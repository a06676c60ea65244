"""Probe outcomes -> one storable run: status, counts, findings, timings. Pure: no I/O."""

from __future__ import annotations

import json
from typing import Any, Optional

from diag.spawn import ProbeOutcome
from diag.store import RunRecord, build_identity


def _split_location(location: Optional[str]) -> tuple[Optional[str], Optional[int]]:
    if not location or ":" not in location:
        return location, None
    file, _, line = location.rpartition(":")
    return (file, int(line)) if line.isdigit() else (location, None)


def probe_failure(outcome: ProbeOutcome) -> Optional[dict[str, Any]]:
    """Status fields when the probe died, hung or wrote no verdict; None when it finished."""
    if outcome.timed_out:
        return {"status": "timeout", "error_type": "Timeout",
                "error_message": f"probe exceeded its time limit after {outcome.duration_s:.0f}s"}
    if outcome.signal:
        return {"status": "crash", "error_type": "Signal", "signal": outcome.signal,
                "error_message": f"probe killed by signal {outcome.signal}"}
    if outcome.first("result") is None:
        detail = f"; {outcome.unreadable_lines} unreadable result lines" if outcome.unreadable_lines else ""
        return {"status": "crash", "error_type": "ProbeExit",
                "error_message": f"probe exited with code {outcome.returncode} without a verdict{detail}"}
    return None


# After these diagnoses no timing is stored; after the compile failures, only eager timings.
NOT_TIMEABLE = {"eager_error", "crash", "timeout"}
EAGER_ONLY = {"fullgraph_error", "compile_error"}


def _timing(outcome: Optional[ProbeOutcome], mode: str) -> Optional[dict[str, Any]]:
    if outcome is None:
        return None
    return next((r for r in outcome.all("timing") if r.get("mode") == mode), None)


def timing_rows(outcome: Optional[ProbeOutcome]) -> list[dict[str, Any]]:
    rows = []
    for mode in ("eager", "compiled"):
        timing = _timing(outcome, mode)
        if timing is None:
            continue
        rows.append({"pass": mode, "metric": "decode_step", "unit": "s",
                     "samples": json.dumps(timing["step_samples_s"])})
        rows.append({"pass": mode, "metric": "generation", "unit": "s",
                     "samples": json.dumps(timing["totals_s"])})
        if timing.get("host_samples_s"):
            rows.append({"pass": mode, "metric": "host_reference", "unit": "s",
                         "samples": json.dumps(timing["host_samples_s"])})
    return rows


def _timing_error(outcome: Optional[ProbeOutcome], compiled_expected: bool = True) -> Optional[str]:
    """Why the timing pass gave no (or partial) timings; None when it finished.

    Where the diagnosis says the case does not compile, the timing pass's compile failure is
    that same failure, already the run's own error, and not repeated here.
    """
    if outcome is None:
        return None
    error = outcome.first("timing_error")
    if error is not None and error.get("mode") == "compiled" and not compiled_expected:
        error = None
    error = error or outcome.first("result")
    if error is not None:
        return f"{error.get('error_type')}: {error.get('error_message')}"
    if outcome.timed_out or outcome.signal or outcome.first("timing") is None:
        failure = probe_failure(outcome)
        return failure["error_message"] + (f"\n{outcome.stderr_tail[-1000:]}" if outcome.stderr_tail else "")
    return None


def row_fields(config: dict[str, Any], case: str) -> dict[str, Any]:
    """The columns that name a run's case x config, as stored."""
    return {
        "case": case, "backend": config["backend"], "fullgraph": int(config["fullgraph"]),
        "dynamic": {None: "auto", True: "true", False: "false"}[config.get("dynamic")],
        "mode": config.get("mode") or "default", "device": config["device"], "dtype": config["dtype"],
        "batch_size": config["batch_size"], "prompt_length": config["prompt_length"],
        "new_tokens": config["new_tokens"], "model": config.get("model") or "tiny-random",
    }


def assemble(config: dict[str, Any], case: str, diagnosis: ProbeOutcome, timing: Optional[ProbeOutcome],
             meta: dict[str, Any], torch_info: dict[str, Any], frames: Optional[list[dict[str, Any]]] = None,
             notes: Optional[dict[str, dict[str, Any]]] = None) -> RunRecord:
    """One RunRecord from the diagnosis pass (and the timing pass, when it ran).

    ``torch_info`` describes the environment as the orchestrator saw it before
    the run; it names the build when the probe died before reporting its own.
    """
    environment = {**torch_info, **(diagnosis.first("environment") or {})}
    result = diagnosis.first("result") or {}
    failure = probe_failure(diagnosis)
    verdict = failure or result
    if verdict.get("status") in NOT_TIMEABLE:
        timing = None
    correctness = diagnosis.first("correctness") or {}
    oracle = diagnosis.first("oracle")
    capabilities = {k: v for k, v in (diagnosis.first("capabilities") or {}).items() if k != "kind"}
    capabilities.update(notes or {})
    if "collector_errors" in result:
        errors = result["collector_errors"]
        capabilities["log_parsing"] = {"available": not errors,
                                       "detail": "; ".join(errors[:5]) if errors else "every log record parsed"}
    for note in diagnosis.all("collector_note"):
        capabilities[note["name"]] = {"available": note["available"], "detail": note["detail"]}
    graph_breaks = [_graph_break_row(r) for r in diagnosis.all("graph_break")]
    recompiles = [{k: r.get(k) for k in ("key", "reason", "function", "frame", "decode_step", "guard_failures")}
                  for r in diagnosis.all("recompile")]
    hidden = [{k: r.get(k) for k in ("key", "source", "exc_type", "message", "logger", "frame", "traceback",
                                     "decode_step", "count")} for r in diagnosis.all("hidden_error")]
    eager_timing, compiled_timing = _timing(timing, "eager"), _timing(timing, "compiled")
    run = {
        **meta,
        **row_fields(config, case),
        "config": json.dumps(config, sort_keys=True),
        "status": verdict.get("status"),
        "error_type": verdict.get("error_type"),
        "error_message": verdict.get("error_message"),
        "error_location": verdict.get("error_location"),
        "error_key": verdict.get("error_key"),
        "traceback": verdict.get("traceback"),
        "signal": verdict.get("signal"),
        "graph_count": result.get("graph_count"),
        "graph_break_count": sum(r["count"] for r in graph_breaks) if failure is None else None,
        "recompile_count": len(recompiles) if failure is None else None,
        "hidden_error_count": sum(r["count"] or 1 for r in hidden) if failure is None else None,
        "tokens_equal": _bool(correctness.get("tokens_equal")),
        "max_abs_diff": correctness.get("max_abs_diff"),
        "first_differing_step": correctness.get("first_differing_step"),
        "eager_margin": correctness.get("eager_margin_at_difference"),
        "oracle_equal": _bool(oracle.get("eager_matches_generate")) if oracle else None,
        "capabilities": json.dumps(capabilities) if capabilities else None,
        "counters": json.dumps(result.get("counters")) if result.get("counters") is not None else None,
        "compile_s": compiled_timing.get("compile_s") if compiled_timing else None,
        "compile_warm_s": compiled_timing.get("compile_warm_s") if compiled_timing else None,
        "eager_ms_per_token": eager_timing.get("median_ms_per_token") if eager_timing else None,
        "compiled_ms_per_token": compiled_timing.get("median_ms_per_token") if compiled_timing else None,
        "peak_mem_eager_mb": eager_timing.get("peak_memory_mb") if eager_timing else None,
        "peak_mem_compiled_mb": compiled_timing.get("peak_memory_mb") if compiled_timing else None,
        "memory_kind": (eager_timing or {}).get("memory_kind"),
        "timing_error": _timing_error(timing, compiled_expected=verdict.get("status") not in EAGER_ONLY),
        "torch_version": environment.get("torch_version"),
        "transformers_version": environment.get("transformers_version"),
        "depyf_version": environment.get("depyf_version"),
        "python": environment.get("python"), "platform": environment.get("platform"),
        "device_name": environment.get("device_name"),
        "exit_code": diagnosis.returncode,
        "stderr_tail": diagnosis.stderr_tail if failure else None,
    }
    build = build_identity(environment["torch_version"], environment.get("git_version"),
                           environment.get("cuda_version"))
    return RunRecord(build=build, run=run, graph_breaks=graph_breaks, recompiles=recompiles,
                     hidden_errors=hidden, timings=timing_rows(timing), frames=list(frames or []))


def _bool(value: Any) -> Optional[int]:
    return None if value is None else int(bool(value))


def _graph_break_row(record: dict[str, Any]) -> dict[str, Any]:
    user_file, user_line = _split_location(record.get("location"))
    return {"key": record.get("key"), "reason": record.get("reason"), "gb_type": record.get("gb_type"),
            "user_file": user_file, "user_line": user_line, "resumable": _bool(record.get("resumable")),
            "decode_step": record.get("decode_step"), "count": record.get("count", 1)}
