"""Where one metric of one row changed level over a history of builds: a step at one build, or a
creep over several, with its size and a 95% interval. Pure: no I/O, no store.

A series is one point per build, in build order (``changes.py`` makes them). The method:

1. A time, an instruction count or a memory figure moves by ratios: it is read on a log scale. A
   count of graphs, breaks or recompiles moves by units: it is read as it is.
2. The noise scale is robust: the median absolute difference of neighbouring points over sqrt 2 (a
   step moves one difference of hundreds), no smaller than the kind's floor.
3. A point further than ``CLIP`` scales beyond the points both before and after it is pulled to
   that distance: a night the noise rules did not mark can still be one bad night, and one point must not
   make a segment of its own.
4. Binary segmentation splits the series into levels of at least ``MIN_SIZE`` builds: a segment is
   split where one split lowers its squared error most, while that split lowers it by more than
   ``PENALTY`` x log(n) squared scales (the penalty PELT takes per change), then each side again.
   Each segment's best split is one pass over its cumulative sums. docs/changes.md says why this is
   not ruptures' PELT: its import alone costs the report more than a night's render.
5. Neighbouring boundaries that move the same way with fewer than ``GAP`` builds between them are one
   change: a creep shows to the segmentation as a staircase. Each change is fitted as a level, a ramp and a level
   (least squares over where the ramp starts and ends); the ramp is kept only where it fits the
   points better than a step by ``RAMP_PENALTY`` squared scales.
6. A change is kept where the ``WINDOW`` builds before its start and after its end differ by a
   two-sided rank test at ``ALPHA``, by at least the kind's smallest change. Its size is the
   Hodges-Lehmann shift between those two windows, with the interval of the rank test.

bench/changes.py measures the constants' effect: a step dated to its build, a creep's start, false
change points in histories with none (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Literal, Optional, Sequence

import numpy as np

from diag.stats import mann_whitney_greater

Scale = Literal["ratio", "count"]
MIN_SIZE = 3  # builds in a level: a change on the newest build shows two nights later, dated to it
PENALTY = 3.0
CLIP = 2.5
GAP = 24
# a series whose best split, before bad nights are pulled in, lowers its squared error by less than
# this share of the penalty has no change: pulling them in lowers what a split gains, as a rule
QUICK = 0.5
RAMP_PENALTY = 8.0
WINDOW = 30
ALPHA = 0.001
LEVEL = 0.95
SMALLEST = {"ratio": 0.01, "count": 0.5}  # a 1% ratio; a count's one unit (a median may be a half)
FLOOR = {"ratio": 0.002, "count": 0.25}  # the noise scale's floor: an exact count, a near-exact time


@dataclass(frozen=True)
class Shift:
    """A change of level: ``start`` is the index of the first point that moved, ``end`` that of the
    first point at the new level (``start`` for a step). ``size`` and its interval are a ratio (the
    ``ratio`` scale) or a difference (``count``), after over before."""

    start: int
    end: int
    size: float
    low: float
    high: float
    p_value: float
    before: int  # points the size was taken over, before the start and from the end
    after: int
    ongoing: bool = False  # a creep still moving at the newest point (``end`` is then the newest)

    @property
    def kind(self) -> str:
        return "step" if self.end == self.start and not self.ongoing else "creep"


def _on_scale(values: Sequence[float], scale: Scale) -> np.ndarray:
    found = np.asarray(values, dtype=float)
    return np.log(found) if scale == "ratio" else found


def noise_scale(points: np.ndarray, scale: Scale) -> float:
    """The robust scale of the points' noise (module docstring, 2)."""
    if len(points) < 3:
        return FLOOR[scale]
    robust = 1.4826 * float(np.median(np.abs(np.diff(points)))) / math.sqrt(2)
    return max(robust, FLOOR[scale])


def clipped(points: np.ndarray, scale_of_noise: float, half: int = 3) -> np.ndarray:
    """Each point that lies more than ``CLIP`` scales beyond both the median of the ``half`` points
    before it and that of the ``half`` after, pulled to that distance from the nearer: a point beside
    a step agrees with one side and is left as it is."""
    n = len(points)
    padded = np.pad(points, half, mode="edge")
    windows = np.lib.stride_tricks.sliding_window_view(padded, half)
    before, after = np.median(windows[:n], axis=1), np.median(windows[half + 1 : half + 1 + n], axis=1)
    limit = CLIP * scale_of_noise
    high, low = np.maximum(before, after) + limit, np.minimum(before, after) - limit
    return np.clip(points, low, high)


def best_split(points: np.ndarray) -> Optional[tuple[int, float]]:
    """Where one split of ``points`` (in scales) lowers their squared error most, and by how much:
    (the index of the first point after it, the reduction); None for fewer than two levels' points."""
    n = len(points)
    if n < 2 * MIN_SIZE:
        return None
    sums = np.cumsum(points)
    k = np.arange(MIN_SIZE, n - MIN_SIZE + 1)
    reduction = (sums[k - 1] - k / n * sums[-1]) ** 2 * n / (k * (n - k))
    best = int(np.argmax(reduction))
    return int(k[best]), float(reduction[best])


def boundaries(points: np.ndarray, scale_of_noise: float) -> list[int]:
    """The segmentation's boundaries: indices of the first point of each level after the first."""
    n = len(points)
    signal = points / scale_of_noise
    penalty = PENALTY * math.log(max(n, 2))
    found, pending = [], [(0, n)]
    while pending:
        low, high = pending.pop()
        split = best_split(signal[low:high])
        if split is not None and split[1] > penalty:
            found.append(low + split[0])
            pending += [(low, low + split[0]), (low + split[0], high)]
    return sorted(found)


def _groups(points: np.ndarray, found: list[int]) -> list[tuple[int, int, int, int]]:
    """Boundaries grouped into changes: (first boundary, last boundary, window start, window end),
    where a window reaches to the neighbouring changes' boundaries."""
    edges = [0, *found, len(points)]
    levels = [float(np.mean(points[a:b])) for a, b in zip(edges, edges[1:])]
    signs = [1 if after > before else -1 for before, after in zip(levels, levels[1:])]
    groups: list[list[int]] = []
    for index, boundary in enumerate(found):
        if groups and signs[index] == signs[groups[-1][-1]] and boundary - found[groups[-1][-1]] < GAP:
            groups[-1].append(index)
        else:
            groups.append([index])
    spans = []
    for number, group in enumerate(groups):
        low = found[groups[number - 1][-1]] if number else 0
        high = found[groups[number + 1][0]] if number + 1 < len(groups) else len(points)
        spans.append((found[group[0]], found[group[-1]], low, high))
    return spans


def _errors(y: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per (start, end) pair, the absolute error of the least-squares level-ramp-level through ``y``
    whose ramp moves from ``start`` (the first point off the first level) to ``end`` (the first at the
    second; ``end == start`` is a step). Absolute, so that two bad nights beside a step do not pass
    for a ramp; all pairs at once."""
    t = np.arange(len(y))[None, :]
    weight = np.clip((t - starts[:, None] + 1) / (ends[:, None] - starts[:, None] + 1), 0.0, 1.0)
    rest = 1 - weight
    a, b, c = (rest * rest).sum(1), (rest * weight).sum(1), (weight * weight).sum(1)
    d1, d2 = rest @ y, weight @ y
    det = np.where(a * c - b * b > 0, a * c - b * b, np.inf)
    low, high = (c * d1 - b * d2) / det, (a * d2 - b * d1) / det
    return np.abs(y[None, :] - low[:, None] * rest - high[:, None] * weight).sum(1)


def placed(y: np.ndarray, first: int, last: int, scale_of_noise: float) -> tuple[int, int]:
    """Where a change of the window ``y`` starts and ends (module docstring, 5)."""
    n = len(y)
    starts = np.arange(max(1, first - GAP), min(n - 1, last + 2) + 1)
    steps = _errors(y, starts, starts)
    pairs = [(s, e) for s in map(int, starts) for e in range(max(s + 1, last - 2), min(n, last + GAP) + 1)]
    step = int(starts[int(np.argmin(steps))])
    if not pairs:
        return step, step
    ramp_starts, ramp_ends = (np.array(side) for side in zip(*pairs))
    ramps = _errors(y, ramp_starts, ramp_ends)
    best = int(np.argmin(ramps))
    if ramps[best] < steps.min() - RAMP_PENALTY * scale_of_noise:
        return int(ramp_starts[best]), int(ramp_ends[best])
    return step, step


def hodges_lehmann(before: np.ndarray, after: np.ndarray, level: float = LEVEL) -> tuple[float, float, float]:
    """The median of after - before over all pairs, and its interval from the rank test's quantile."""
    differences = np.sort(np.subtract.outer(after, before).ravel())
    n1, n2 = len(after), len(before)
    z = statistics.NormalDist().inv_cdf((1 + level) / 2)
    k = int(math.floor(n1 * n2 / 2 - z * math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)))
    k = min(max(k, 0), len(differences) - 1)
    return float(np.median(differences)), float(differences[k]), float(differences[len(differences) - 1 - k])


def shifts(values: Sequence[float], scale: Scale) -> list[Shift]:
    """The changes of level of ``values`` (one point per build, oldest first), oldest first."""
    points = _on_scale(values, scale)
    if len(points) < 2 * MIN_SIZE:
        return []
    sigma = noise_scale(points, scale)
    whole = best_split(points / sigma)
    if whole is not None and whole[1] <= QUICK * PENALTY * math.log(len(points)):
        return []  # not even the best split of the points as they are comes near the penalty
    cleaned = clipped(points, sigma)
    found = []
    for first, last, low, high in _groups(cleaned, boundaries(cleaned, sigma)):
        window = cleaned[low:high]
        start, end = placed(window, first - low, last - low, sigma)
        start, end = start + low, end + low
        before = cleaned[max(low, start - WINDOW) : start]
        # a ramp still rising at the newest build: its newest points stand for the level it reached
        after = cleaned[min(end, high - MIN_SIZE) : min(high, end + WINDOW)]
        if len(before) < MIN_SIZE or len(after) < MIN_SIZE:
            continue
        shift = _sized(before, after, scale, start, min(end, len(points) - 1), end >= len(points))
        if shift.p_value >= ALPHA or abs(moved(shift, scale)) < (
            math.log1p(SMALLEST[scale]) if scale == "ratio" else SMALLEST[scale]
        ):
            continue
        found.append(shift)
    return found


def _sized(
    before: np.ndarray, after: np.ndarray, scale: Scale, start: int = 0, end: int = 0, ongoing: bool = False
) -> Shift:
    """The rank test and Hodges-Lehmann shift of ``after`` over ``before`` (points on the scale)."""
    higher, lower_ = mann_whitney_greater(list(after), list(before)), mann_whitney_greater(list(before), list(after))
    p_value = min(1.0, 2 * min(higher if higher is not None else 1.0, lower_ if lower_ is not None else 1.0))
    size, lower, upper = hodges_lehmann(before, after)
    if scale == "ratio":
        size, lower, upper = math.exp(size), math.exp(lower), math.exp(upper)
    return Shift(start, end, size, lower, upper, p_value, len(before), len(after), ongoing)


def between(before: Sequence[float], after: Sequence[float], scale: Scale) -> Shift:
    """The shift of ``after`` over ``before`` (every point of each), as ``shifts`` sizes a change."""
    return _sized(_on_scale(before, scale), _on_scale(after, scale), scale)


def moved(shift: Shift, scale: Scale) -> float:
    """How far ``shift`` moved on the scale it was searched on: a log ratio, or a count's units."""
    return math.log(shift.size) if scale == "ratio" else shift.size


def worse(shift: Shift, scale: Scale) -> bool:
    """Whether ``shift`` raised the metric (every metric diag tracks is better lower)."""
    return shift.size > (1.0 if scale == "ratio" else 0.0)


def beyond(shift: Shift, scale: Scale, threshold: Optional[float]) -> bool:
    """Whether ``shift`` moved the metric by more than ``threshold`` (a ratio, or units of a count)."""
    if threshold is None:
        return True
    if scale == "ratio":
        return max(shift.size, 1 / shift.size) > threshold
    return abs(shift.size) > threshold
