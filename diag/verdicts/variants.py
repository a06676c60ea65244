"""Variant against variant on one build: is case B faster than case A, by how much, how sure. Pure.

Rows of the two cases pair up when every other field of the row agrees (backend, fullgraph,
sizes, ...): each pair is one point, and a sweep gives one point per batch size or length.
Per mode, each run gives one latency summary (as ``check`` summarises it: host-adjusted on CPU,
see regress.py); the ratio is B's median summary over A's, and its 95% interval comes from
resampling the runs of both sides (a fixed seed: the same runs give the same interval). The
verdict: ``slower`` or ``faster`` where the interval leaves out 1 and the ratio is at least
``MIN_EFFECT`` (2%) away from it; ``no difference`` otherwise; ``noisy`` where a side has no
run whose timing was steady (diag/noise.py); ``too few runs`` under ``MIN_RUNS`` a side.
"""

from __future__ import annotations

import functools
import random
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Optional, Sequence

from diag import row as rows
from diag.store.typed import StoredRun
from diag.verdicts import timing_change

MIN_EFFECT = 0.02
MIN_RUNS = 2
LEVEL = 0.95
RESAMPLES = 2000
MODES = ("compiled", "eager")


@dataclass
class Point:
    point: str  # the pair's row label, without the case
    mode: str
    runs_a: int
    runs_b: int
    ms_a: Optional[float]  # the median of each side's runs' median steps, in ms
    ms_b: Optional[float]
    ratio: Optional[float]  # B's summary over A's: above 1, B is slower
    low: Optional[float]
    high: Optional[float]
    basis: str
    verdict: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _key(row: rows.Row) -> rows.Row:
    return row._replace(case="", case_source="")


def ratio_interval(a: Sequence[float], b: Sequence[float], seed: int = 0) -> tuple[float, float]:
    """The percentile bootstrap interval of median(b) / median(a), resampling each side's values
    (seeded: the same values give the same interval, so one worked out is kept for the process)."""
    return _ratio_interval(tuple(a), tuple(b), seed)


@functools.lru_cache(maxsize=4096)
def _ratio_interval(a: tuple[float, ...], b: tuple[float, ...], seed: int) -> tuple[float, float]:
    rng = random.Random(seed)
    ratios = sorted(
        statistics.median(rng.choices(b, k=len(b))) / statistics.median(rng.choices(a, k=len(a)))
        for _ in range(RESAMPLES)
    )
    tail = (1 - LEVEL) / 2
    return ratios[int(tail * RESAMPLES)], ratios[min(RESAMPLES - 1, int((1 - tail) * RESAMPLES))]


def verdict(ratio: float, low: float, high: float) -> str:
    if low > 1 and ratio >= 1 + MIN_EFFECT:
        return "slower"
    if high < 1 and ratio <= 1 - MIN_EFFECT:
        return "faster"
    return "no difference"


def _point(label: str, mode: str, runs_a: list[StoredRun], runs_b: list[StoredRun]) -> Optional[Point]:
    timed_a, steady_a = timing_change.timed_and_steady(runs_a, mode)
    timed_b, steady_b = timing_change.timed_and_steady(runs_b, mode)
    if not timed_a or not timed_b:
        return None
    counts = (len(steady_a), len(steady_b))

    def ms(runs: list[StoredRun]) -> Optional[float]:
        return (
            statistics.median(statistics.median(timing_change.samples_of(r, mode)) for r in runs) * 1e3
            if runs
            else None
        )

    if not steady_a or not steady_b:
        return Point(label, mode, *counts, ms(timed_a), ms(timed_b), None, None, None, "", "noisy")
    a, b, basis = timing_change.run_summaries(mode, steady_a, steady_b)
    ratio = statistics.median(b) / statistics.median(a)
    if min(counts) < MIN_RUNS:
        return Point(label, mode, *counts, ms(steady_a), ms(steady_b), ratio, None, None, basis, "too few runs")
    low, high = ratio_interval(a, b)
    return Point(label, mode, *counts, ms(steady_a), ms(steady_b), ratio, low, high, basis, verdict(ratio, low, high))


def compare(runs_a: Sequence[StoredRun], runs_b: Sequence[StoredRun]) -> list[Point]:
    """Every point where both variants have timed runs, in row order; compiled first, then eager."""
    by_a: dict[rows.Row, list[StoredRun]] = {}
    by_b: dict[rows.Row, list[StoredRun]] = {}
    for run in runs_a:
        by_a.setdefault(_key(rows.of(run)), []).append(run)
    for run in runs_b:
        by_b.setdefault(_key(rows.of(run)), []).append(run)
    found = []
    for key in sorted(set(by_a) & set(by_b), key=rows.sort_key):
        label = rows.config_label(key._asdict())
        for mode in MODES:
            point = _point(label, mode, by_a[key], by_b[key])
            if point is not None:
                found.append(point)
    return found
