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
from typing import Any, Callable, Optional

from diag.probe import attribution, records
from diag.probe.cases import load_case_file
from diag.probe.record_types import ResultRecord
from diag.probe.records import Writer
from diag.probe.session import Workload, error_location, exception_info
from diag.probe.spec import Spec
from diag.probe.timing import host, interleaved


def _error(exc: BaseException, case_path: str) -> ResultRecord:
    info = exception_info(exc)
    return {
        "error_type": info["error_type"],
        "error_message": (info.get("error_message") or "")[:2000],
        "error_location": error_location(exc, case_path),
    }


def run(specs: list[Spec], results: Writer) -> None:
    """One ``race`` record for ``specs`` (one config, several cases)."""
    start = time.perf_counter()
    ready: list[Workload] = []
    errors: dict[str, ResultRecord] = {}
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
    between: dict[str, list[float]] = {w.spec.case: [] for w in ready}
    running: list[Workload] = []  # the variant whose generation is under way

    def each(name: str, _total: float, gen: Any) -> None:
        medians[name].append(statistics.median(gen.step_seconds) if gen.step_seconds else _total)
        if gen.between_seconds:
            between[name].append(statistics.median(gen.between_seconds))

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
            between.pop(failed.spec.case, None)
            whole = min(len(m) for m in medians.values())  # the rounds every other variant finished
            for kept in medians.values():
                del kept[whole:]
    profiled = _profiled(ready) if ready and ready[0].spec.config.profile else None
    results.write(
        records.RACE,
        variants=[w.spec.case for w in ready],
        generation_median_s=medians,
        between_median_s=between,
        profiled=profiled,
        errors=errors,
        order="interleaved",
        threads=ready[0].torch.get_num_threads() if ready else None,
        seconds=time.perf_counter() - start,
        **host(),
    )


PROFILED_ROUNDS = 10


def _profiled(ready: list[Workload]) -> dict[str, Any]:
    """After the timed rounds: ``PROFILED_ROUNDS`` rounds of one profiled compiled generation per
    variant, alternating as the timed ones do; per variant, each round's attribution
    (probe/attribution.py), and the fused kernels torch refused with its reasons where it gives them
    (CUDA). Where the profiler fails, the rounds so far and its error."""
    found: dict[str, list[dict[str, Any]]] = {w.spec.case: [] for w in ready}
    failed: Optional[ResultRecord] = None

    def each(name: str, _total: float, attributed: Any) -> None:
        found[name].append(attributed)

    def under_profiler(workload: Workload) -> Callable[[], Any]:
        return lambda: attribution.profiled(workload, workload.compiled)

    refused: dict[str, dict[str, dict[str, int]]] = {}
    try:
        for workload in ready:  # one eager generation each, where torch can say why it refused a kernel
            refused[workload.spec.case] = attribution.refusals(workload, workload.eager)
        interleaved(ready[0], {w.spec.case: under_profiler(w) for w in ready}, PROFILED_ROUNDS, 0.0, each)
    except Exception as exc:  # the profiler is a view on the race: its failure is said, not the race's
        failed = exception_info(exc)
    error = f"{failed.get('error_type')}: {(failed.get('error_message') or '')[:500]}" if failed else None
    return {"rounds": found, "refused": {case: r for case, r in refused.items() if r}, "error": error}
