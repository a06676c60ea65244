"""Compiled variants raced in one process (``diag race``): each variant compiled and warmed, then
rounds of one compiled generation per variant, the order reversed every other round (ABBA, as the
timing pass alternates eager and compiled). Two variants timed in two processes, one after the
other, differ by whatever the host did between them (on a shared 2-core machine, +-15% from one
run to the next); within a round the host is the same for both, so the orchestrator compares
each round's pair (diag/race.py).

Imports: standard library, torch, transformers (through ``session``).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

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

    def each(name: str, _total: float, gen: Any) -> None:
        medians[name].append(statistics.median(gen.step_seconds) if gen.step_seconds else _total)

    if len(ready) >= 2:
        cfg = ready[0].spec.config
        modes = {w.spec.case: w.compiled for w in ready}
        interleaved(ready[0], modes, cfg.repeats, cfg.timing_seconds, each)
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
