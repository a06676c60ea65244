"""A run directory's records -> one storable run: status, counts, findings, timings. Pure: no I/O.

Each step below takes pass outcomes (diag/run/rundir.py) and returns columns. Record fields
carry their column's name (diag/probe/records.py), so a record maps to its row by name;
fields the record format does not declare are kept in the row's ``extra`` column.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, Optional, TypedDict, cast

from diag import guards
from diag import row as rows
from diag.build import identity as build_identity
from diag.contract import errors_in_stderr, record_types, records, stable_key, statuses
from diag.run import profile, trace
from diag.run.measured import instruction_columns, timing_columns, timing_compile_error, timing_error, timing_rows
from diag.run.rundir import STDERR_TAIL_BYTES, PassOutcome, RunFiles, probe_failure
from diag.store import RunRecord, environment_row
from diag.store.typed import FrameRow, GraphBreakRow, HiddenErrorRow, RecompileRow, RunRow


def verdict(diagnosis: PassOutcome) -> RunRow:
    """The run's status and its error columns: the diagnosis pass's result, or why there is none."""
    failure = probe_failure(diagnosis)
    if failure is not None:
        return cast(RunRow, {**failure, "stderr_tail": diagnosis.stderr_tail[-STDERR_TAIL_BYTES:]})
    result = diagnosis.first(records.RESULT) or {}
    fields = records.declared(result)
    # capabilities and counts say these; a run with an environment error is refused before storing
    for name in ("collector_errors", "log_records", "graph_break_count", "environment_error"):
        fields.pop(name)
    fields["counters"] = json.dumps(fields["counters"]) if fields["counters"] is not None else None
    return cast(RunRow, fields)  # the result record's fields are named as the columns (records.py)


class Findings(TypedDict):
    """The rows of each finding table (``statuses.FINDING_KINDS`` names them), as stored."""

    graph_breaks: list[GraphBreakRow]
    recompiles: list[RecompileRow]
    hidden_errors: list[HiddenErrorRow]


def _with_extra(record: Mapping[str, Any]) -> records.JSONObject:
    """A record's declared fields as columns, and what else it holds as JSON in ``extra``."""
    unknown = records.extra(record)
    return {**records.declared(record), "extra": json.dumps(unknown, default=str) if unknown else None}


def findings(diagnosis: PassOutcome) -> Findings:
    """Rows of each finding table, one per record the diagnosis pass wrote."""
    found = {kind.table: [_with_extra(r) for r in diagnosis.of(kind.record)] for kind in statuses.FINDING_KINDS}
    for row in found["recompiles"]:
        row.update(guards.parse(row.get("reason")))  # what changed: subject, property, expected, actual
    return cast(Findings, found)  # a finding record's fields are named as its table's columns


def _rows(found: Findings, table: str) -> list[Mapping[str, Any]]:
    return cast(dict[str, list[Mapping[str, Any]]], found)[table]


TIMING_PASS = "timing_pass"  # the source of a hidden error kept from the timing pass


def timing_pass_evidence(timing: Optional[PassOutcome]) -> list[HiddenErrorRow]:
    """What the timing pass saw, as hidden-error rows marked ``timing_pass``: kept when the diagnosis
    pass died, so that what torch said survives the crash. The tracebacks torch printed on the
    pass's stderr, then the pass's own compile error."""
    if timing is None:
        return []
    seen = [(t["exc_type"], t["message"], t["location"], t["traceback"]) for t in errors_in_stderr(timing.stderr_tail)]
    error = timing.first(records.TIMING_ERROR)
    if error is not None:
        seen.append((error["error_type"], error["error_message"], error.get("error_location"), error.get("traceback")))
    rows: list[HiddenErrorRow] = []
    index: dict[tuple[Any, ...], HiddenErrorRow] = {}
    for exc_type, message, location, tb in seen:
        ident = (exc_type, message, location)
        if ident in index:
            index[ident]["count"] = (index[ident]["count"] or 0) + 1
            continue
        index[ident] = {
            "key": stable_key(exc_type, message, location),
            "source": TIMING_PASS,
            "exc_type": exc_type,
            "message": message,
            "logger": "timing pass",
            "location": location,
            "traceback": tb,
            "decode_step": None,
            "count": 1,
            "extra": None,
        }
        rows.append(index[ident])
    return rows


def counts(found: Findings, status: str, unseen: frozenset = frozenset()) -> RunRow:
    """Graph breaks, recompiles and hidden errors, each the one total of its rows; none for a run
    that never compiled (a crash, a timeout, a broken case), nor for a kind the build gave diag no
    means to see (``unseen``): '-' is not 0. A run whose diagnosis died still counts the hidden
    errors kept from its timing pass."""
    never = status in statuses.NEVER_COMPILED
    columns = {
        kind.count_column: None
        if (never or kind.count_column in unseen) and not _rows(found, kind.table)
        else statuses.finding_total(_rows(found, kind.table))
        for kind in statuses.FINDING_KINDS
    }
    return cast(RunRow, columns)  # each finding kind names its count column (statuses.FINDING_KINDS)


def unseen(diagnosis: PassOutcome) -> frozenset:
    """The count columns this build gave diag no means to see: recompiles on a torch with neither a
    recompiles log nor dynamo's guard_failures."""
    found = (diagnosis.first(records.CAPABILITIES) or {}).get("capabilities") or {}
    recompiles = found.get("recompiles_log") or {}
    return frozenset({"recompile_count"}) if recompiles.get("available") is False else frozenset()


def recompile_split(found: Findings, status: str, unseen: frozenset = frozenset()) -> RunRow:
    """Recompiles before the first decode step (the prefill's own shapes) apart from those during decode,
    and on how many distinct decode steps decode recompiled: a fixed-size cache exists so that it
    compiles once, and one that recompiles on every step is a finding of its own (``check`` gates
    on it: ``regress.Thresholds.decode_recompile_steps``)."""
    if (status in statuses.NEVER_COMPILED or "recompile_count" in unseen) and not found["recompiles"]:
        return {"prefill_recompiles": None, "decode_recompiles": None, "decode_recompile_steps": None}
    # the prefill's: those at records.PREFILL, and those stored before it was told apart (no step)
    steps = [(r, r.get("decode_step")) for r in found["recompiles"]]
    prefill = [r for r, step in steps if step is None or step < 0]
    decode = [r for r, step in steps if step is not None and step >= 0]
    return {
        "prefill_recompiles": statuses.finding_total(prefill),
        "decode_recompiles": statuses.finding_total(decode),
        "decode_recompile_steps": len({r["decode_step"] for r in decode}),
    }


def second_call(diagnosis: PassOutcome) -> RunRow:
    """What a second compiled generation right after the first recompiled (``records.SECOND_CALL``)."""
    found = diagnosis.first(records.SECOND_CALL)
    if found is None:
        return {"second_call_recompiles": None, "second_call_error": None}
    return {"second_call_recompiles": found.get("recompiles"), "second_call_error": found.get("error")}


def capabilities(diagnosis: PassOutcome, notes: Mapping[str, record_types.Capability]) -> Optional[str]:
    """What each collector could do on this torch (JSON), with the orchestrator's own notes."""
    found = dict((diagnosis.first(records.CAPABILITIES) or {}).get("capabilities") or {})
    found.update(notes)
    result = diagnosis.first(records.RESULT)
    if result is not None and result.get("collector_errors") is not None:
        errors = result["collector_errors"]
        found["log_parsing"] = {
            "available": not errors,
            "detail": "; ".join(errors[:5]) if errors else "every log record parsed",
        }
    for note in diagnosis.all(records.COLLECTOR_NOTE):
        found[note["name"]] = {"available": note["available"], "detail": note["detail"]}
    oracle = diagnosis.first(records.ORACLE)
    if oracle is not None and oracle.get("detail"):
        found["generate_oracle"] = {
            "available": oracle.get("oracle_equal") is not None,
            "detail": ("required: " if oracle.get("required") else "") + oracle["detail"],
        }
    return json.dumps(found) if found else None


def correctness(diagnosis: PassOutcome) -> RunRow:
    found = diagnosis.first(records.CORRECTNESS) or {}
    oracle = diagnosis.first(records.ORACLE)
    return {
        "tokens_equal": _bool(found.get("tokens_equal")),
        "max_abs_diff": found.get("max_abs_diff"),
        "first_differing_step": found.get("first_differing_step"),
        "eager_margin": found.get("eager_margin"),
        "oracle_equal": _bool(oracle.get("oracle_equal")) if oracle else None,
    }


def build_columns(build: record_types.BuildRecord) -> RunRow:
    """The run's copy of what its build record says beside torch (Python, libraries, machine)."""
    return {
        "torch_version": build.get("torch_version"),
        "transformers_version": build.get("transformers_version"),
        "depyf_version": build.get("depyf_version"),
        "python": build.get("python"),
        "platform": build.get("platform"),
        "device_name": build.get("device_name"),
    }


def with_metrics(frames: Optional[list[FrameRow]], diagnosis: PassOutcome) -> list[FrameRow]:
    """The trace's frames, each with every field torch's in-process metrics hold for it (JSON, matched
    by compile id); where the trace has no frames (torch before 2.4), one frame per metrics entry."""
    recorded = diagnosis.first(records.COMPILE_METRICS)
    whole = (recorded or {}).get("frames") or []
    metrics = [_compact(m) for m in whole]
    if not frames:  # the row's own fields from the whole metrics: a long fail_reason is text, not its digest
        return [{**trace.frame_row(m), "metrics": json.dumps(_compact(m), sort_keys=True)} for m in whole]
    by_id = {str(m.get("compile_id")): m for m in metrics}
    frames = [FrameRow(**frame) for frame in frames]
    for frame in frames:
        found = by_id.get(str(frame.get("compile_id")))
        frame["metrics"] = json.dumps(found, sort_keys=True) if found is not None else None
    return frames


BULKY = 512  # characters of JSON: a field longer than this is kept as its digest on the frame


def _compact(metrics: records.JSONObject) -> records.JSONObject:
    """Every field, the bulky ones (the four config dumps, node shapes and the stack: 40 KB a frame,
    the same on every frame of a run) as their sha256 and length; the run directory's diagnose.jsonl
    keeps them whole."""
    compact = {}
    for name, value in metrics.items():
        text = json.dumps(value, sort_keys=True, default=str)
        if len(text) > BULKY:
            value = {"sha256": hashlib.sha256(text.encode()).hexdigest()[:16], "chars": len(text)}
        compact[name] = value
    return compact


def guard_latency(timing: Optional[PassOutcome], diagnosis: PassOutcome) -> Optional[float]:
    """The guard check a steady decode call pays (microseconds): for each compiled code object, the
    guard latency torch measured on its newest cache entry (the one a steady call finds first),
    summed over the code objects. From the timing pass (logging off) where it reported metrics."""
    for outcome in (timing, diagnosis):
        recorded = outcome.first(records.COMPILE_METRICS) if outcome is not None else None
        if recorded is None:
            continue
        newest: dict[tuple, float] = {}
        for m in recorded.get("frames") or []:
            if m.get("guard_latency_us") is not None:
                newest[(m.get("co_filename"), m.get("co_name"), m.get("co_firstlineno"))] = float(m["guard_latency_us"])
        if newest:
            return sum(newest.values())
    return None


def assemble(
    files: RunFiles,
    fallback_build: record_types.BuildRecord,
    frames: Optional[list[FrameRow]] = None,
    notes: Optional[Mapping[str, record_types.Capability]] = None,
) -> RunRecord:
    """One RunRecord from a run directory's files (see diag/run/rundir.py).

    ``fallback_build`` names the build when the probe died before writing its build record.
    """
    spec, diagnosis = files.spec, files.diagnosis
    build = diagnosis.first(records.BUILD) or fallback_build
    status_fields = verdict(diagnosis)
    status = status_fields["status"] or ""
    timing = None if status in statuses.NOT_TIMEABLE else files.timing
    found = findings(diagnosis)
    frames = with_metrics(frames, diagnosis)
    died = probe_failure(diagnosis) is not None
    if died:
        found["hidden_errors"] += timing_pass_evidence(files.timing)
    run: RunRow = {
        **cast(RunRow, spec.get("run", {})),  # what the runner knew of the run (uid, start, invocation)
        "artifacts_dir": str(files.directory),
        "case_path": spec["case_path"],
        **cast(RunRow, rows.columns(spec["config"], spec["case"], spec.get("case_source") or rows.BUILTIN)),
        "config": json.dumps(spec["config"], sort_keys=True),
        **status_fields,
        **counts(found, status, unseen(diagnosis)),
        **recompile_split(found, status, unseen(diagnosis)),
        **second_call(diagnosis),
        **correctness(diagnosis),
        "capabilities": capabilities(diagnosis, notes or {}),
        "case_note": "; ".join(note["text"] for note in diagnosis.all(records.CASE_NOTE)) or None,
        **timing_columns(timing, spec["config"].get("device")),
        **instruction_columns(files.count),
        "guard_latency_us": guard_latency(timing, diagnosis),
        "timing_error": timing_compile_error(files.timing)
        if died
        else timing_error(timing, compiled_expected=status not in statuses.EAGER_ONLY),
        **build_columns(build),
        "duration_s": files.probe_exit.get("duration_s"),
        **costs(files, frames),
        "exit_code": diagnosis.returncode,
        "extra": _result_extra(diagnosis, timing, spec.get("ci"), str(spec["config"].get("device")).startswith("cuda")),
    }
    identity = build_identity(
        build.get("torch_version") or "unknown", build.get("git_version"), build.get("cuda_version"), spec.get("wheel")
    )
    return RunRecord(
        build=identity,
        run=run,
        graph_breaks=found["graph_breaks"],
        recompiles=found["recompiles"],
        hidden_errors=found["hidden_errors"],
        timings=timing_rows(timing),
        frames=list(frames or []),
        environment=environment_row(
            build.get("python"), build.get("cuda_version"), build.get("driver_version"), build.get("packages")
        ),
    )


def costs(files: RunFiles, frames: Optional[list[FrameRow]]) -> RunRow:
    """Each pass's wall time and the structured-logging overhead torch reported (the orchestrator's
    own time is added by the runner, which sees it)."""
    overheads = [f.get("structured_logging_overhead_s") or 0.0 for f in frames or []]
    return {
        "timing_pass_s": files.timing.duration_s if files.timing is not None else None,
        "diagnosis_pass_s": files.diagnosis.duration_s,
        "logging_overhead_s": sum(overheads) if any(overheads) else None,
    }


def _result_extra(
    diagnosis: PassOutcome,
    timing: Optional[PassOutcome] = None,
    ci: Optional[records.JSONObject] = None,
    device: bool = False,
) -> Optional[str]:
    """Fields of the diagnosis records that no column holds, the profile (diag run --profile), and
    where a CI job keeps the run directory (runner.ci_provenance)."""
    found = {
        kind: records.extra(diagnosis.first(kind) or {"kind": kind})
        for kind in (records.RESULT, records.CORRECTNESS, records.BUILD)
    }
    unknown: records.JSONObject = {kind: fields for kind, fields in found.items() if fields}
    if ci:
        unknown["ci"] = ci
    profiled = timing.first(records.PROFILE) if timing is not None else None
    if profiled is not None:
        unknown["profile"] = {name: profiled.get(name) for name in ("trace", "top", "seconds")}
        unknown["profile"].update(profile.summary(profiled.get("attributed") or [], device, profiled.get("refused")))
    return json.dumps(unknown, default=str) if unknown else None


def _bool(value: Any) -> Optional[int]:
    return None if value is None else int(bool(value))
