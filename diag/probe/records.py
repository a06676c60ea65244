"""The record format: every record a probe writes and the orchestrator reads, defined once.

A results file is JSON lines, one record per line, flushed and synced per record so that
a pass that dies keeps what it had written. Every record carries ``kind`` (one of
``KINDS``) and ``v`` (``FORMAT_VERSION``), then the fields its kind declares.

Writers use :class:`Writer`, which refuses a field its kind does not declare, so that a
typo in the probe fails a test instead of silently storing nothing. Readers use
:func:`read`, which keeps every field it finds: fields a newer probe added are returned
by :func:`extra` and stored, not dropped. Where a record's field names a DB column, the
name is the column's (see diag/store.py), so a record maps to its row by name alone.

Standard library only: the probe imports it inside bare torch environments, and the
orchestrator imports it to read what the probe wrote.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping, TypeVar

from diag.probe.cases import PREFILL  # noqa: F401 (re-exported: the records' step of the prefill)

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Kind:
    name: str
    doc: str
    fields: dict[str, str]  # field -> type, as JSON holds it: str, int, float, bool, list, dict; "?" = may be null


KINDS: dict[str, Kind] = {}
K = TypeVar("K", bound=str)
# A JSON object with no declared shape: a record as read (a newer probe may add fields), a field
# declared only as "dict". Each kind's own shape is its TypedDict in record_types.py.
JSONObject = dict[str, Any]


def _kind(name: K, doc: str, /, **fields: str) -> K:
    KINDS[name] = Kind(name, doc, fields)
    return name


# The build a pass ran on: torch, its commit and CUDA version, Python, and the libraries beside torch.
BUILD: Literal["build"] = _kind(
    "build",
    "the torch build and interpreter a pass ran on",
    torch_version="str",
    git_version="str?",
    cuda_version="str?",
    python="str",
    platform="str",
    executable="str",
    device_name="str?",
    transformers_version="str?",
    depyf_version="str?",
    # every installed distribution, name: version (what else moved between two runs), and the GPU
    # driver where there is one
    packages="dict?",
    driver_version="str?",
)
ORACLE: Literal["oracle"] = _kind(
    "oracle",
    "eager tokens against transformers' own greedy generate (required of diag's model "
    "and prompt; recorded, where possible, for a case's own)",
    oracle_equal="bool?",
    required="bool",
    detail="str",
)
CAPABILITIES: Literal["capabilities"] = _kind(
    "capabilities", "which collectors this torch offers, each with why it is missing", capabilities="dict"
)
COLLECTOR_NOTE: Literal["collector_note"] = _kind(
    "collector_note", "a collector that changed its mind during the pass", name="str", available="bool", detail="str"
)
GRAPH_BREAK: Literal["graph_break"] = _kind(
    "graph_break",
    "one graph break (or a frame that fell back to eager), counted",
    key="str",
    reason="str",
    gb_type="str?",
    location="str?",
    resumable="bool",
    decode_step="int?",
    last_decode_step="int?",
    count="int",
)
RECOMPILE: Literal["recompile"] = _kind(
    "recompile",
    "one recompile: the guard that failed and the decode step in flight",
    key="str",
    reason="str",
    function="str?",
    location="str?",
    decode_step="int?",
    guard_failures="int",
)
HIDDEN_ERROR: Literal["hidden_error"] = _kind(
    "hidden_error",
    "an exception or fallback torch logged instead of raising",
    key="str",
    source="str",
    exc_type="str",
    message="str",
    logger="str",
    location="str?",
    traceback="str?",
    decode_step="int?",
    last_decode_step="int?",
    count="int",
)
CASE_NOTE: Literal["case_note"] = _kind(
    "case_note", "what the case said about how it ran (Generation.note): a fallback it took and why", text="str"
)
CORRECTNESS: Literal["correctness"] = _kind(
    "correctness",
    "compiled tokens and logits against eager",
    tokens_equal="bool",
    max_abs_diff="float",
    logit_tolerance="float",
    first_differing_step="int?",
    eager_margin="float?",
    within_tolerance="bool",
)
SECOND_CALL: Literal["second_call"] = _kind(
    "second_call",
    "a second compiled generation right after the first (same prompt and sizes), as transformers' "
    "compile tests make one: a decode step that compiles once recompiles nothing here",
    recompiles="int",
    reasons="list",
    error="str?",
)
RESULT: Literal["result"] = _kind(
    "result",
    "the diagnosis pass's verdict: one status (see statuses.py) and its evidence",
    status="str",
    graph_count="int?",
    graph_break_count="int?",
    ops_captured="int?",
    counters="dict?",
    log_records="int?",
    collector_errors="list?",
    error_type="str?",
    error_message="str?",
    traceback="str?",
    error_location="str?",
    error_key="str?",
    environment_error="str?",
)
TIMING: Literal["timing"] = _kind(
    "timing",
    "per-token samples of one mode (eager or compiled) from the timing pass",
    mode="str",
    memory_kind="str",
    peak_memory_mb="float",
    first_total_s="float?",
    totals_s="list",
    step_samples_s="list",
    host_samples_s="list",
    median_ms_per_token="float?",
    between_samples_s="list?",
    median_between_ms="float?",
    compile_s="float?",
    compile_cpu_s="float?",
    compile_stall_s="float?",
    compile_warm_s="float?",
    compile_notices="list?",
    graph_cache_hits="int?",
    order="str?",
    threads="int?",
    load_1m="float?",
    cpus="int?",
)
PROFILE: Literal["profile"] = _kind(
    "profile",
    "an eager and a compiled generation under torch.profiler (diag run --profile): the "
    "Chrome trace's file in the run directory and the ops with the most self time; and compiled "
    "generations attributed by op per decode step (probe/attribution.py); on CUDA, the fused SDPA "
    "kernels torch refused, each reason with its number of calls",
    trace="str",
    top="list",
    attributed="list?",
    refused="dict?",
    seconds="float",
)
INSTRUCTIONS: Literal["instructions"] = _kind(
    "instructions",
    "the instructions the cold compile executed (diag run --count-instructions; probe/instructions.py): "
    "the method, the count (the least of the repeats; callgrind's is added by the supervisor when "
    "valgrind has written it), every repeat's, and why there is none",
    method="str?",
    count="int?",
    counts="list",
    note="str?",
)
COMPILE_METRICS: Literal["compile_metrics"] = _kind(
    "compile_metrics",
    "every field of torch's per-frame compilation metrics after the pass's compiles (torch >= 2.3)",
    frames="list",
)
TIMING_ERROR: Literal["timing_error"] = _kind(
    "timing_error",
    "why the timing pass could not time a mode",
    mode="str",
    error_type="str",
    error_message="str",
    traceback="str?",
    environment_error="str?",
    error_location="str?",
)
RACE: Literal["race"] = _kind(
    "race",
    "compiled variants timed side by side in one process (diag race): per variant, the median "
    "decode step of each timed generation, the generations of one round paired by index, and its "
    "median between-step time; with --profile, each profiled round's attribution by op "
    "(probe/attribution.py) and, on CUDA, the fused SDPA kernels torch refused with its reasons; "
    "and why a variant could not be raced",
    variants="list",
    generation_median_s="dict",
    between_median_s="dict?",
    profiled="dict?",
    errors="dict",
    order="str",
    threads="int?",
    load_1m="float?",
    cpus="int?",
    seconds="float",
)
# The race's profiled rounds (probe/attribution.py) name two figures that are no op's: the Python a
# decode step ran outside any op, and diag's own recording of the step's logits.
OUTSIDE_ANY_OP = "(outside any op)"

RECORDING_THE_STEP = "(diag: recording the step)"
# How a process ended: each pass as the probe saw it (passes.jsonl), and the probe itself as the
# orchestrator saw it (probe.jsonl), so that a run directory alone holds everything a run is made of.
EXIT: Literal["exit"] = _kind(
    "exit",
    "how one process ended: a pass, or the probe process",
    name="str",
    returncode="int?",
    signal="int?",
    timed_out="bool",
    duration_s="float",
    oom_kills="int?",
    launch="str?",  # the probe process only: forked from a probe parent, or a process of its own and why
)
CASE_CHECK: Literal["case_check"] = _kind(
    "case_check",
    "whether a case file imports and registers one case in the target environment",
    file="str",
    ok="bool",
    name="str?",
    error="str?",
)
DEVICE_CHECK: Literal["device_check"] = _kind(
    "device_check", "whether the target environment's torch can use a device", device="str", ok="bool", error="str?"
)


class RecordError(ValueError):
    """A record a writer may not write: unknown kind or undeclared field."""


def make(kind: str, /, **fields: Any) -> JSONObject:
    """A record of ``kind``; RecordError for an unknown kind or a field the kind does not declare."""
    spec = KINDS.get(kind)
    if spec is None:
        raise RecordError(f"unknown record kind {kind!r}")
    undeclared = sorted(set(fields) - set(spec.fields))
    if undeclared:
        raise RecordError(f"record {kind!r} declares no field {', '.join(undeclared)}")
    return {"kind": kind, "v": FORMAT_VERSION, **fields}


def extra(record: Mapping[str, Any]) -> JSONObject:
    """The fields of ``record`` its kind does not declare (written by a newer probe); kept, not dropped."""
    spec = KINDS.get(record.get("kind", ""))
    declared = set(spec.fields) if spec else set()
    return {k: v for k, v in record.items() if k not in declared and k not in ("kind", "v")}


def declared(record: Mapping[str, Any]) -> JSONObject:
    """The declared fields of ``record``, each present (None where the record left it out)."""
    return {name: record.get(name) for name in KINDS[record["kind"]].fields}


class Writer:
    """Appends records to a JSON-lines file, flushed and synced per record."""

    def __init__(self, path: str | Path) -> None:
        self._file = open(path, "a", encoding="utf-8")

    def write(self, kind: str, /, **fields: Any) -> None:
        line = json.dumps(make(kind, **fields), default=str, ensure_ascii=True)
        self._file.write(line + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read(path: str | Path) -> tuple[list[JSONObject], int]:
    """The records of a results file, and how many lines could not be read (a torn last write, garbage).

    A missing file has no records. A line that is JSON but not a record of a known kind counts as
    unreadable; a known kind with fields this reader does not know is kept whole.
    """
    path = Path(path)
    found: list[JSONObject] = []
    bad = 0
    if not path.exists():
        return found, bad
    with open(path, "rb") as handle:
        for raw in handle:
            try:
                record = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                bad += 1
                continue
            if isinstance(record, dict) and record.get("kind") in KINDS:
                found.append(record)
            else:
                bad += 1
    return found, bad
