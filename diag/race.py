"""Judging a race (diag/probe/race.py, ``diag race``): each variant against the first. Pure.

A race is rounds of one compiled generation per variant in one process; a round's generations
ran within milliseconds of each other, so the host's speed, whatever it was doing, is the same
for both. Each round gives one paired ratio, B's median decode step over A's in that round; the
figure is the median of those ratios, and its 95% interval the median's exact bootstrap interval
(stats.median_interval). Verdicts as between stored variants (variants.py): ``slower`` or
``faster`` where the interval leaves out 1 and the ratio is at least 2% away from it,
``no difference`` otherwise; ``noisy`` where the interval reaches further than 10% of the ratio
on either side (noise.HALF_WIDTH: the rule a run's own timing is held to), ``too few rounds``
under ``MIN_ROUNDS``.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any, Optional

from diag import noise, variants
from diag.stats import median_interval

MIN_ROUNDS = 6


@dataclass
class Verdict:
    a: str
    b: str
    rounds: int
    ms_a: Optional[float]  # the median of A's generations' median decode steps, in ms
    ms_b: Optional[float]
    ratio: Optional[float]  # the median of B / A per round: above 1, B is slower
    low: Optional[float]
    high: Optional[float]
    verdict: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def judge(record: dict[str, Any]) -> list[Verdict]:
    """Each raced variant after the first against the first, from a ``race`` record."""
    names = record["variants"]
    medians = record["generation_median_s"]
    found = []
    for b in names[1:]:
        a = names[0]
        pairs = [(x, y) for x, y in zip(medians[a], medians[b]) if x > 0 and y > 0]
        ms_a = statistics.median(x for x, _ in pairs) * 1e3 if pairs else None
        ms_b = statistics.median(y for _, y in pairs) * 1e3 if pairs else None
        if len(pairs) < MIN_ROUNDS:
            found.append(Verdict(a, b, len(pairs), ms_a, ms_b, None, None, None, "too few rounds"))
            continue
        ratios = [y / x for x, y in pairs]
        ratio = statistics.median(ratios)
        low, high = median_interval(ratios)
        if max(ratio - low, high - ratio) > noise.HALF_WIDTH * ratio:
            said = "noisy"
        else:
            said = variants.verdict(ratio, low, high)
        found.append(Verdict(a, b, len(pairs), ms_a, ms_b, ratio, low, high, said))
    return found


def lines(label: str, build: str, record: dict[str, Any], verdicts: list[Verdict]) -> list[str]:
    """What ``diag race`` prints for one config."""
    out = [f"{label} on torch {build}:"]
    for v in verdicts:
        figures = (
            f"{v.ratio:.3f} (95% {v.low:.3f}-{v.high:.3f})"
            if v.ratio is not None and v.low is not None and v.high is not None
            else "-"
        )
        ms = " / ".join("-" if m is None else f"{m:.3f}" for m in (v.ms_b, v.ms_a))
        out.append(f"  {v.b} / {v.a}: {figures} {v.verdict}, {v.rounds} rounds, {ms} ms/token")
    for name, error in record.get("errors", {}).items():
        where = f" at {error['error_location']}" if error.get("error_location") else ""
        first = (error.get("error_message") or "").strip().splitlines()
        out.append(f"  {name}: not raced, {error['error_type']}{where}: {first[0][:200] if first else ''}")
    return out
