"""The count pass (``diag run --count-instructions``): the instructions the cold compile executes.

A compile's wall time on a shared runner includes its waits for other work; the instructions it
executes do not depend on them. PyTorch's own compile-time benchmarks gate on such counts. The pass
counts the first compiled generation (the compile of every frame, any recompile of its decode steps,
and one generation's run), after one uncounted compile has paid what a process pays once (lazy
imports, first-use set-up), with dynamo reset and inductor given an empty cache before each counted
one. Inductor's C++ compiler runs in other processes, which neither method counts.

Two methods, the first that works on the host (``compat.instruction_method``):

- ``perf``: the CPU's instruction counter (perf events), through ``torch._C._instruction_counter``;
  the least of ``PERF_REPEATS`` counts.
- ``callgrind``: valgrind's callgrind, the pass's process started under it with collection off, and
  collection toggled on only around the counted generation (``torch._C._valgrind_toggle``). The count
  does not depend on the machine's load (bench/instructions.py measures its spread), so one is
  taken; valgrind writes it when the process exits, and the supervisor reads it from
  ``CALLGRIND_FILE`` (``callgrind_total``), which stays in the run directory for callgrind_annotate.

Imports: standard library at import time; torch in the functions that count.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any, Optional

from diag.probe import records
from diag.probe.record_types import Found
from diag.probe.records import Writer

PERF_REPEATS = 5
CALLGRIND_FILE = "callgrind.out"
METHODS = ("perf", "callgrind")


def valgrind_argv(run_dir: Path) -> list[str]:
    """The command line the supervisor starts the pass under, for the callgrind method."""
    return [
        "valgrind",
        "--tool=callgrind",
        "--collect-atstart=no",
        "--trace-children=no",
        f"--callgrind-out-file={run_dir / CALLGRIND_FILE}",
    ]


_TOTALS = re.compile(r"^(?:totals|summary):\s+(\d+)", re.MULTILINE)


def callgrind_total(path: Path) -> Optional[int]:
    """The instructions (Ir, callgrind's first event) collected while collection was on, as the
    file's ``totals:`` line says (``summary:`` in older valgrinds); None where there is no such file
    or line (valgrind died before writing it)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    found = _TOTALS.findall(text)
    return int(found[-1]) if found else None


@contextlib.contextmanager
def _cold(torch):
    """Dynamo reset and, where this torch has it, inductor on an empty cache directory."""
    torch._dynamo.reset()
    try:
        from torch._inductor.utils import fresh_inductor_cache
    except ImportError:  # a torch without it: the compile finds what the warm-up left in the cache
        yield
        return
    with fresh_inductor_cache():
        yield


def _counted_perf(workload) -> list[int]:
    counter = workload.torch._C._instruction_counter
    counts = []
    for _ in range(PERF_REPEATS):
        with _cold(workload.torch):
            handle = counter.start()
            workload.compiled()
            workload.synchronize()
            counts.append(counter.end(handle))
    return counts


def _counted_callgrind(workload) -> None:
    toggle = workload.torch._C._valgrind_toggle
    with _cold(workload.torch):
        toggle()
        try:
            workload.compiled()
            workload.synchronize()
        finally:
            toggle()


def run(workload, results: Writer, how: str) -> None:
    """One eager generation and one uncounted compiled generation, then the counted ones; where the
    compile fails, a ``timing_error`` record (mode ``count``) says how, and no count is written."""
    from diag.probe.session import error_location, exception_info

    fields: dict[str, Any] = {"method": how}
    try:
        workload.eager()
        workload.compiled()  # what the first compile of a process pays once: not the build's compile
        if how == "perf":
            counts = _counted_perf(workload)
            fields.update(count=min(counts), counts=counts)
        else:
            _counted_callgrind(workload)
            fields.update(count=None, counts=[])  # valgrind writes it at exit: the supervisor adds it
    except Exception as exc:
        where = error_location(exc, workload.case.path)
        results.write(records.TIMING_ERROR, mode="count", error_location=where, **exception_info(exc))
        return
    results.write(records.INSTRUCTIONS, **fields)


def skip_reason(diagnosis_results: Path) -> Optional[str]:
    """Why the count pass would count nothing: the diagnosis found no compile that completes (its
    status, from its results file); None where it did, or where it left no verdict to go by."""
    from diag.probe import statuses

    found, _ = records.read(diagnosis_results)
    result = Found(found).first(records.RESULT)
    status = result.get("status") if result else None
    if status in statuses.NOT_TIMEABLE or status in statuses.EAGER_ONLY:
        return f"not counted: the diagnosis found no compile that completes ({status})"
    return None
