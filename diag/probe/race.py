"""Compiled variants raced in one process (``diag race``): each variant compiled and warmed, then
rounds of one compiled generation per variant, the order reversed every other round (ABBA, as the
timing pass alternates eager and compiled). Two variants timed in two processes, one after the
other, differ by whatever the host did between them (on a shared 2-core machine, +-15% from one
run to the next); within a round the host is the same for both, so the orchestrator compares
each round's pair (diag/verdicts/race.py).

Imports: standard library, torch, transformers (through ``session``).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from diag.probe import records
from diag.probe.cases import load_case_file
from diag.probe.records import Writer
from diag.probe.session import Workload, error_location, exception_info
from diag.probe.spec import Spec
from diag.probe.timing import host, interleaved


def _error(exc: BaseException, case_path: str) -> dict[str, Any]:
    info = exception_info(exc)
    return {
        "error_type": info["error_type"],
        "error_message": info["error_message"][:2000],
        "error_location": error_location(exc, case_path),
    }


def run(specs: list[Spec], results: Writer) -> None:
    """One ``race`` record for ``specs`` (one config, several cases)."""
    start = time.perf_counter()
    ready: list[Workload] = []
    errors: dict[str, Any] = {}
    for spec in specs:
        try:
            workload = Workload(spec, load_case_file(spec.case_path), like=ready[0] if ready else None)
            for _ in range(max(spec.config.warmup, 1)):  # the first compiles
                workload.compiled()
        except Exception as exc:
            errors[spec.case] = _error(exc, spec.case_path)
            continue
        ready.append(workload)
    medians: dict[str, list[float]] = {w.spec.case: [] for w in ready}
    running: list[Workload] = []  # the variant whose generation is under way

    def each(name: str, _total: float, gen: Any) -> None:
        medians[name].append(statistics.median(gen.step_seconds) if gen.step_seconds else _total)

    def timed(workload: Workload) -> Callable[[], Any]:
        def generate() -> Any:
            running[:] = [workload]
            return workload.compiled()

        return generate

    while len(ready) >= 2:
        cfg = ready[0].spec.config
        try:
            interleaved(ready[0], {w.spec.case: timed(w) for w in ready}, cfg.repeats, cfg.timing_seconds, each)
            break
        except Exception as exc:  # a variant that compiled and then failed: the others race on without it
            (failed,) = running
            errors[failed.spec.case] = _error(exc, failed.spec.case_path)
            ready.remove(failed)
            del medians[failed.spec.case]
            whole = min(len(m) for m in medians.values())  # the rounds every other variant finished
            for kept in medians.values():
                del kept[whole:]
    results.write(
        records.RACE,
        variants=[w.spec.case for w in ready],
        generation_median_s=medians,
        errors=errors,
        order="interleaved",
        threads=ready[0].torch.get_num_threads() if ready else None,
        seconds=time.perf_counter() - start,
        **host(),
    )
