"""Whether a run's latency figures can be trusted: the interval of each mode's median, and the
verdict ``noisy`` with its reason in plain words. Pure: no I/O.

A run is noisy when, for either mode, the 95% interval of the median per-token step reaches
further than ``HALF_WIDTH`` (10%) of the median on either side, or the steps fall into two
clusters at least ``GAP`` (2x) apart that each hold a tenth of them: a host that ran part of the
run at another speed; or its steps, or the host reference timed beside each generation, spread
wider than ``SPREAD`` (p90 over p10 past 3x): a median's interval over many samples is narrow
however widely they spread, and a machine shared with installs, compiles and tests slows a run
unevenly, not in two speeds. On an idle machine the interval of a run of the README's first command
is within about 2% (docs/BENCHMARKS.md); a busy 2-core machine with torch's own thread count
produced steps of 0.5 ms and 44 ms in one run. A noisy run keeps its figures, but ``check``,
``compare`` and the report give no latency verdict from it.

A compile is judged apart (``compile_noise``): on a CPU device its wall time is its CPU time (the
probe's and its compiler processes') unless it waited for the machine; one whose wall time is more
than ``WAITED`` (1.3x) its CPU time, by a second or more, waited, and gives no compile-time verdict.
So does one in which some task waited for a CPU (Linux PSI) for ``STALLED`` of its wall time or more,
by a second or more: it shared the cores, which a compile running in parallel shows no other way.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Optional, Sequence

from diag.stats import bimodal, median_interval, quantile

HALF_WIDTH = 0.10
GAP = 2.0
SHARE = 0.1
LEVEL = 0.95
# The spread of a run's samples, p90 over p10: on an idle 2-core machine a run's decode steps spread
# 1.3-2.4x and its host references 1.2-1.9x; under a mixed load (package installs, a browser, compiles
# and a test run beside it) 4.7x and 10x, while each median's interval stayed within +-10% (many
# samples make it narrow whatever their spread). Past SPREAD, the run is noisy.
SPREAD = 3.0
SPREAD_SAMPLES = 10  # fewer samples than this give no p10 or p90 worth the name


@dataclass
class Noise:
    noisy: bool
    note: Optional[str]  # the reason in plain words, for the run line, show and the report
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # mode: (low, high) in ms


def _deciles(samples: Sequence[float]) -> Optional[tuple[float, float]]:
    """(p10, p90) of ``samples``; None where there are too few, or p10 is not above zero."""
    if len(samples) < SPREAD_SAMPLES:
        return None
    low, high = quantile(samples, 0.1), quantile(samples, 0.9)
    return (low, high) if low > 0 else None


def spread(samples: Sequence[float]) -> Optional[float]:
    """p90 over p10 of ``samples``; None where there are too few, or p10 is not above zero."""
    found = _deciles(samples)
    return None if found is None else found[1] / found[0]


def _spread_reason(what: str, samples: Sequence[float]) -> Optional[str]:
    found = _deciles(samples)
    if found is None or found[1] / found[0] <= SPREAD:
        return None
    low, high = found
    return f"{what} spread {high / low:.1f}x (p10 {low * 1e3:.2f} ms, p90 {high * 1e3:.2f} ms)"


def assess(
    samples: dict[str, Sequence[float]],
    load: Optional[float] = None,
    cpus: Optional[int] = None,
    host: Optional[dict[str, Sequence[float]]] = None,
) -> Noise:
    """``samples``: per mode, the per-token steps in seconds; ``load``: the 1-minute load average when
    the timing pass ended; ``cpus``: the CPUs the probe could run on; ``host``: per mode, the host
    reference timed beside each generation (the machine's own speed over the run)."""
    intervals: dict[str, tuple[float, float]] = {}
    reasons = []
    for mode, steps in samples.items():
        if not steps:
            continue
        interval = median_interval(steps, LEVEL)
        assert interval is not None  # steps is not empty
        low, high = interval
        median = statistics.median(steps)
        intervals[mode] = (low * 1e3, high * 1e3)
        if median > 0:
            reach = max(median - low, high - median) / median
            if reach > HALF_WIDTH:
                reasons.append(f"{mode} median +-{reach:.0%}")
        if bimodal(steps, GAP, SHARE):
            reasons.append(f"{mode} steps in two clusters")
        elif said := _spread_reason(f"{mode} steps", steps):
            reasons.append(said)
    for mode, references in (host or {}).items():
        if said := _spread_reason(f"{mode} host reference", references):
            reasons.append(said)
    if not reasons:
        return Noise(False, None, intervals)
    if load is not None and cpus:
        reasons.append(f"load {load:.1f} on {cpus} core{'s' if cpus != 1 else ''}")
    return Noise(True, "timing noisy (" + "; ".join(reasons) + ")", intervals)


NOT_COMPARED = "not compared"


WAITED = 1.3  # wall time past this multiple of the compile's CPU time: it waited for the machine
WAITED_AT_LEAST_S = 1.0  # and by this much: a sub-second compile's file reads are not a busy machine
# some task waited for a CPU (PSI) for this share of the compile's wall time: it shared the cores. A
# compile that runs in parallel on an idle machine (inductor's workers beside the probe) takes less
# wall time than CPU time, so the rule above misses the parallelism that a busy machine takes away
STALLED = 0.2


def compile_noise(
    wall_s: Optional[float],
    cpu_s: Optional[float],
    device: Optional[str],
    load: Optional[float],
    cpus: Optional[int],
    stall_s: Optional[float] = None,
) -> Optional[str]:
    """Why a compile's wall time cannot be trusted, in plain words; None where it can, or where it is not
    judged (neither CPU time nor stall measured, or a GPU device, whose compile legitimately waits for
    its kernels' benchmarks)."""
    if wall_s is None or (device or "cpu") != "cpu":
        return None
    said = None
    if cpu_s is not None and wall_s > WAITED * cpu_s and wall_s - cpu_s >= WAITED_AT_LEAST_S:
        said = f"compile waited: {wall_s:.1f} s wall for {cpu_s:.1f} s CPU"
    elif stall_s is not None and stall_s >= STALLED * wall_s and stall_s >= WAITED_AT_LEAST_S:
        said = f"compile shared the cores: for {stall_s:.1f} s of its {wall_s:.1f} s some task waited for a CPU"
    if said is not None and load is not None and cpus:
        said += f"; load {load:.1f} on {cpus} core{'s' if cpus != 1 else ''}"
    return said
