"""The structured trace (TORCH_TRACE, torch >= 2.3): per-frame compilation metrics, and tlparse's report.

The diagnosis probe runs with TORCH_TRACE pointing into the run directory;
afterwards the orchestrator reads the ``compilation_metrics`` records (torch
>= 2.4) and renders tlparse's HTML report from the same log. Neither may
fail a run: problems come back as notes stored with the run's capabilities.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Optional, cast

from diag.contract import record_types
from diag.store.typed import FrameRow, RunRow, StoredRun

FRAME_FIELDS = (
    "compile_id",
    "co_name",
    "co_filename",
    "co_firstlineno",
    "cache_size",
    "accumulated_cache_size",
    "guard_count",
    "shape_env_guard_count",
    "graph_op_count",
    "graph_node_count",
    "graph_input_count",
    "entire_frame_compile_time_s",
    "backend_compile_time_s",
    "inductor_compile_time_s",
    "code_gen_time_s",
    "fail_type",
    "fail_reason",
    "structured_logging_overhead_s",
)
Note = tuple[bool, str]


def frame_row(metrics: Mapping[str, Any]) -> FrameRow:
    """A frames row from one frame's compilation metrics (the trace's record, or torch's in-process one)."""
    row = cast(FrameRow, {field: metrics.get(field) for field in FRAME_FIELDS})  # fields named as the columns
    row["compile_id"] = str(row["compile_id"]) if row["compile_id"] is not None else None
    row["restart_reasons"] = json.dumps(metrics.get("restart_reasons") or [])
    return row


def frame_count(run: StoredRun) -> tuple[Optional[int], str]:
    """How many frames a stored run's compile made, and why that is unknown where it is: a count only
    where frames were stored or the run says torch's compilation metrics were read (and held none);
    else None, never 0: before torch 2.4 (no trace), a run that did not record what it read, or one
    whose frames and capabilities were pruned."""
    found = run.get("frames") or []
    said = (run.get("capabilities") or {}).get("compilation_metrics")
    if found or (isinstance(said, dict) and said.get("available") is True):
        return len(found), ""
    if isinstance(said, dict):
        return None, str(said.get("detail") or "torch's compilation metrics were not read")
    return None, "the run holds no note of torch's compilation metrics (not recorded, or pruned)"


def trace_logs(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log")) if directory.is_dir() else []


def frames(directory: Path) -> tuple[list[FrameRow], Note]:
    """One row per compilation_metrics record in the trace logs of ``directory``."""
    logs = trace_logs(directory)
    if not logs:
        return [], (False, "no TORCH_TRACE log was written (structured trace needs torch >= 2.3)")
    rows, unreadable = [], 0
    for log in logs:
        with open(log, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if '"compilation_metrics"' not in line or "{" not in line:
                    continue
                try:
                    metrics = json.loads(line[line.index("{") :])["compilation_metrics"]
                except (ValueError, KeyError, TypeError):
                    unreadable += 1
                    continue
                rows.append(frame_row(metrics))
    if not rows:
        return [], (False, "the trace has no compilation_metrics records (they arrived in torch 2.4)")
    detail = f"{len(rows)} compilation_metrics records"
    return rows, (True, detail + (f", {unreadable} unreadable lines skipped" if unreadable else ""))


def find_tlparse(*pythons: Optional[str]) -> Optional[str]:
    """tlparse on PATH, else beside one of ``pythons`` (the target environment's, the orchestrator's):
    a virtualenv's bin is not on PATH unless it is activated."""
    found = shutil.which("tlparse")
    if found:
        return found
    for python in (*pythons, sys.executable):
        if python:
            candidate = Path(python).parent / ("tlparse.exe" if os.name == "nt" else "tlparse")
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def render_tlparse(directory: Path, out_dir: Path, timeout_s: float = 300, python: Optional[str] = None) -> Note:
    """tlparse's HTML report for the trace in ``directory``, written to ``out_dir``."""
    logs = trace_logs(directory)
    if not logs:
        return False, "no TORCH_TRACE log to render"
    binary = find_tlparse(python)
    if binary is None:
        return False, "tlparse is not installed (pip install tlparse)"
    try:
        done = subprocess.run(
            [binary, str(logs[0]), "-o", str(out_dir), "--overwrite", "--no-browser"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"tlparse failed: {exc}"
    if done.returncode != 0 or not (out_dir / "index.html").exists():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return False, f"tlparse exited {done.returncode}: {last}"
    return True, f"tlparse report at {out_dir / 'index.html'}"


def collect(
    run_dir: Path, compiled: bool = True, python: Optional[str] = None
) -> tuple[list[FrameRow], dict[str, record_types.Capability]]:
    """Frames and capability notes for a finished diagnosis probe.

    ``compiled``: whether the diagnosis got as far as compiling. A run that never compiled
    writes no trace, and its notes say that, not that the torch lacks one.
    """
    if not compiled and not trace_logs(run_dir / "trace"):
        nothing = (False, "nothing was compiled, so no trace was written")
        notes = {"compilation_metrics": nothing, "tlparse": nothing}
        return [], {name: {"available": ok, "detail": detail} for name, (ok, detail) in notes.items()}
    rows, frames_note = frames(run_dir / "trace")
    tlparse_note = render_tlparse(run_dir / "trace", run_dir / "tlparse", python=python)
    notes = {"compilation_metrics": frames_note, "tlparse": tlparse_note}
    return rows, {name: {"available": ok, "detail": detail} for name, (ok, detail) in notes.items()}


# What a compiled graph's code is, by what the trace holds of it: inductor's output code where the
# backend generated some, else dynamo's graph (every backend gets one)
CODE_KINDS = ("inductor_output_code", "dynamo_output_graph")
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:[\w.@+-]+/)+[\w.@+-]*")
_SYMBOL = re.compile(r"\b([su])(\d+)\b")
_ADDRESS = re.compile(r"0x[0-9a-f]{6,}")


def normalized_code(code: str) -> str:
    """A graph's code without what differs from one run of the same build to the next: comments (the
    source lines they quote, kernel paths, node mappings), absolute paths, addresses, and the numbers
    torch gave its size symbols (renumbered in order of appearance)."""
    kept = [line.rstrip() for line in code.splitlines() if line.strip() and not line.strip().startswith("#")]
    text = _ADDRESS.sub("0x", _ABSOLUTE_PATH.sub("<path>", "\n".join(kept)))
    numbered: dict[str, str] = {}

    def renumber(found: re.Match[str]) -> str:
        return numbered.setdefault(found[0], f"{found[1]}{len([k for k in numbered if k[0] == found[1]])}")

    return _SYMBOL.sub(renumber, text)


def _graph_payloads(log: Path) -> dict[tuple, dict[str, str]]:
    """Per compiled graph (frame, compile, attempt, in the order compiled), the payload of each of
    CODE_KINDS the trace holds for it."""
    graphs: dict[tuple, dict[str, str]] = {}
    current: Optional[list[str]] = None
    with open(log, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if line.startswith("\t"):
                if current is not None:
                    current.append(line[1:])
                continue
            current = None
            kind = next((k for k in CODE_KINDS if f'{{"{k}"' in line), None)
            if kind is None or "{" not in line:
                continue
            try:
                header = json.loads(line[line.index("{") :])
            except ValueError:
                continue
            graph = (header.get("frame_id"), header.get("frame_compile_id"), header.get("attempt"))
            current = []
            graphs.setdefault(graph, {})[kind] = current  # type: ignore[assignment]
    return {graph: {kind: "".join(lines) for kind, lines in kinds.items()} for graph, kinds in graphs.items()}


def code_of(directory: Path, compiled: bool = True) -> RunRow:
    """The run's ``code_digest`` (over its compiled graphs' code, in the order compiled: two runs with
    the same digest compiled the same code) and ``code_note`` (what was hashed, or why nothing was)."""
    logs = trace_logs(directory)
    if not compiled and not logs:
        return RunRow(code_digest=None, code_note="nothing was compiled")
    if not logs:
        return RunRow(
            code_digest=None, code_note="no TORCH_TRACE log was written (structured trace needs torch >= 2.3)"
        )
    graphs: dict[tuple, dict[str, str]] = {}
    for log in logs:
        graphs.update(_graph_payloads(log))
    if not graphs:
        return RunRow(code_digest=None, code_note="the trace holds no compiled graph's code")
    digests, kinds = [], set()
    for kinds_held in graphs.values():
        kind = next(k for k in CODE_KINDS if k in kinds_held)
        kinds.add("inductor's output code" if kind == CODE_KINDS[0] else "dynamo's graph code")
        digests.append(hashlib.sha256(normalized_code(kinds_held[kind]).encode()).hexdigest())
    digest = hashlib.sha256("\n".join(digests).encode()).hexdigest()[:16]
    graphs_said = f"{len(digests)} graph{'s' if len(digests) != 1 else ''}"
    return RunRow(code_digest=digest, code_note=f"{graphs_said}: {' and '.join(sorted(kinds))}")
