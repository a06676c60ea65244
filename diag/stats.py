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
    table = [[None] * (n2 + 1) for _ in range(n1 + 1)]
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
