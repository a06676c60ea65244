"""The statistics the gate's timing verdicts use: an exact one-sided Mann-Whitney U test over runs,
how many runs a side it needs to reach a level, and a quantile. Pure, standard library only."""

from __future__ import annotations

import math
from typing import Optional, Sequence


def _ranks(values: Sequence[float]) -> tuple[list[float], float]:
    """Mid-ranks of ``values`` (1-based) and the tie term sum(t^3 - t)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    ties = 0.0
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        ties += (j - i + 1) ** 3 - (j - i + 1)
        i = j + 1
    return ranks, ties


EXACT_LIMIT = 400  # n1 * n2 up to which the U distribution is counted exactly


def _exact_upper_tail(n1: int, n2: int, u: float) -> float:
    """P(U >= u) for samples of n1 and n2 with no ties: counts of arrangements by U (a DP)."""
    # counts[i][j][k]: arrangements of i values of one side and j of the other with U = k
    size = n1 * n2
    table: list[list[list[int]]] = [[[] for _ in range(n2 + 1)] for _ in range(n1 + 1)]
    for i in range(n1 + 1):
        for j in range(n2 + 1):
            if i == 0 or j == 0:
                row = [0] * (size + 1)
                row[0] = 1
                table[i][j] = row
                continue
            row = [0] * (size + 1)
            left, down = table[i - 1][j], table[i][j - 1]
            for k in range(size + 1):
                # the largest value belongs to the first side (it beats all j of the other), or not
                row[k] = (left[k - j] if k >= j else 0) + down[k]
            table[i][j] = row
    counts = table[n1][n2]
    total = sum(counts)
    return sum(counts[k] for k in range(size + 1) if k >= u - 1e-9) / total


def mann_whitney_greater(after: Sequence[float], before: Sequence[float]) -> Optional[float]:
    """One-sided p-value that ``after`` tends to be larger than ``before``; None with an empty side.

    Exact where the samples are small and untied; otherwise the normal approximation with tie
    and continuity corrections (as asv does).
    """
    n1, n2 = len(after), len(before)
    if n1 == 0 or n2 == 0:
        return None
    ranks, ties = _ranks([*after, *before])
    u = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    if ties == 0 and n1 * n2 <= EXACT_LIMIT:
        return _exact_upper_tail(n1, n2, u)
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:
        return 1.0
    z = (u - n1 * n2 / 2 - 0.5) / math.sqrt(variance)  # continuity correction
    return 0.5 * math.erfc(z / math.sqrt(2))


def runs_needed(alpha: float) -> int:
    """Runs a side the rank test needs to be able to reach ``alpha`` at all (1 / C(2n, n) < alpha)."""
    n = 1
    while 1 / math.comb(2 * n, n) >= alpha and n < 1000:
        n += 1
    return n


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _at_least(n: int, p: float, m: int) -> float:
    """P(X >= m) for X ~ Binomial(n, p)."""
    if m <= 0:
        return 1.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    base = math.lgamma(n + 1)
    return min(
        1.0,
        sum(
            math.exp(base - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_p + (n - k) * log_q)
            for k in range(m, n + 1)
        ),
    )


def median_interval(samples: Sequence[float], level: float = 0.95) -> Optional[tuple[float, float]]:
    """The percentile bootstrap interval of the median at ``level``, computed exactly rather than by
    resampling: a resample's median is at or below the j-th smallest sample when at least half of
    its n draws are, which happens with probability P(Binomial(n, j/n) >= (n+1)//2). The same
    samples give the same interval every time. None for no samples."""
    ordered = sorted(samples)
    n = len(ordered)
    if n == 0:
        return None
    middle = (n + 1) // 2  # a resample's (lower) median is its middle-th smallest draw
    tail = (1 - level) / 2

    def first_reaching(target: float) -> float:
        low, high = 1, n  # the smallest j whose P(median* <= x_j) reaches target
        while low < high:
            j = (low + high) // 2
            if _at_least(n, j / n, middle) >= target:
                high = j
            else:
                low = j + 1
        return ordered[low - 1]

    return first_reaching(tail), first_reaching(1 - tail)


def bimodal(samples: Sequence[float], gap: float = 2.0, share: float = 0.1) -> bool:
    """Whether the samples fall into two clusters a factor ``gap`` or more apart, each holding at
    least ``share`` of them (and at least two): a host that ran some steps at another speed."""
    ordered = sorted(samples)
    n = len(ordered)
    least = max(2, math.ceil(share * n))
    for i in range(least - 1, n - least):
        if ordered[i] > 0 and ordered[i + 1] / ordered[i] >= gap:
            return True
    return False
