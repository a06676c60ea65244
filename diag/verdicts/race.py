"""Judging a race (diag/probe/race.py, ``diag race``): each variant against the first. Pure.

A race is rounds of one compiled generation per variant in one process; a round's generations
ran within milliseconds of each other, so the host's speed, whatever it was doing, is the same
for both. Each round gives one paired ratio, B's median decode step over A's in that round; the
figure is the median of those ratios, and its 95% interval the median's exact bootstrap interval
(stats.median_interval). Verdicts as between stored variants (variants.py): ``slower`` or
``faster`` where the interval leaves out 1 and the ratio is at least 2% away from it,
``no difference`` otherwise; ``noisy`` where the interval reaches further than 10% of the ratio
on either side (noise.HALF_WIDTH: the rule a run's own timing is held to), ``too few rounds``
under ``MIN_ROUNDS``, ``not raced`` where either side failed to build or compile (its error kept).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Optional

from diag import noise
from diag import row as rows
from diag.contract import record_types
from diag.stats import median_interval
from diag.store.typed import RaceRow
from diag.verdicts import variants

MIN_ROUNDS = 6
NOT_RACED = "not raced"


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
    failed: Optional[str] = None  # not raced: the case that failed (a or b)
    error: Optional[record_types.ResultRecord] = None  # its error_type, error_message, error_location

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def judge(record: record_types.RaceRecord, names: list[str]) -> list[Verdict]:
    """Each of ``names`` after the first (the baseline) against the first, from a ``race`` record."""
    medians = record["generation_median_s"]
    errors = record.get("errors") or {}
    a = names[0]
    found = []
    for b in names[1:]:
        failed = a if a in errors else b if b in errors else None
        if failed is not None:
            found.append(Verdict(a, b, 0, None, None, None, None, None, NOT_RACED, failed, errors[failed]))
            continue
        pairs = [(x, y) for x, y in zip(medians[a], medians[b]) if x > 0 and y > 0]
        ms_a = statistics.median(x for x, _ in pairs) * 1e3 if pairs else None
        ms_b = statistics.median(y for _, y in pairs) * 1e3 if pairs else None
        if len(pairs) < MIN_ROUNDS:
            found.append(Verdict(a, b, len(pairs), ms_a, ms_b, None, None, None, "too few rounds"))
            continue
        ratios = [y / x for x, y in pairs]
        ratio = statistics.median(ratios)
        interval = median_interval(ratios)
        assert interval is not None  # at least MIN_ROUNDS ratios
        low, high = interval
        if max(ratio - low, high - ratio) > noise.HALF_WIDTH * ratio:
            said = "noisy"
        else:
            said = variants.verdict(ratio, low, high)
        found.append(Verdict(a, b, len(pairs), ms_a, ms_b, ratio, low, high, said))
    return found


def lines(label: str, build: str, record: record_types.RaceRecord, verdicts: list[Verdict]) -> list[str]:
    """What ``diag race`` prints for one config."""
    out = [f"{label} on torch {build}:"]
    for v in verdicts:
        if v.error is not None:
            error = v.error
            where = f" at {error['error_location']}" if error.get("error_location") else ""
            first = (error.get("error_message") or "").strip().splitlines()
            said = f"{error['error_type']}{where}: {first[0][:200] if first else ''}"
            out.append(f"  {v.b} / {v.a}: not raced, {v.failed} failed: {said}")
            continue
        figures = (
            f"{v.ratio:.3f} (95% {v.low:.3f}-{v.high:.3f})"
            if v.ratio is not None and v.low is not None and v.high is not None
            else "-"
        )
        ms = " / ".join("-" if m is None else f"{m:.3f}" for m in (v.ms_b, v.ms_a))
        out.append(f"  {v.b} / {v.a}: {figures} {v.verdict}, {v.rounds} rounds, {ms} ms/token")
        if v.verdict == "noisy":
            out.append(f"    {noisy_advice(v, record)}")
        between = record.get("between_median_s") or {}
        steps = [between_ms(between, name) for name in (v.b, v.a)]
        if any(ms is not None for ms in steps):
            said = " / ".join("-" if ms is None else f"{ms:.3f}" for ms in steps)
            out.append(f"    between steps, outside the compiled calls: {said} ms a step")
    return out


def noisy_advice(v: Verdict, record: Mapping[str, Any]) -> str:
    """What to do about a noisy race: more rounds narrow the interval as the square root of their
    count; a machine whose load was past its CPUs shared them with the race."""
    width = max(v.ratio - v.low, v.high - v.ratio) / v.ratio if v.ratio and v.low and v.high else None
    load, cpus = record.get("load_1m"), record.get("cpus")
    busy = (
        f"; the load was {load:.1f} on {cpus} CPUs, so other work shared them" if load and cpus and load > cpus else ""
    )
    if width is None:
        return "noisy: run it again with a longer --timing-seconds" + busy
    # rounds for a half-width of 10%, were the spread the same: the interval narrows as 1/sqrt(rounds)
    wanted = math.ceil(v.rounds * (width / noise.HALF_WIDTH) ** 2)
    factor = max(2, math.ceil(wanted / max(v.rounds, 1)))
    return (
        f"noisy: the interval is +-{width:.0%} (a verdict needs +-{noise.HALF_WIDTH:.0%}); about {wanted} rounds "
        f"would narrow it enough at this spread: run it again with {factor}x the --timing-seconds "
        f"(1 s by default){busy}"
    )


def stored(
    race_uid: str,
    started_at: str,
    build: record_types.BuildRecord,
    config: Mapping[str, Any],
    sources: dict[str, str],
    record: record_types.RaceRecord,
    verdicts: list[Verdict],
    profiles: Optional[Mapping[str, Mapping[str, Any]]] = None,
) -> list[RaceRow]:
    """The ``races`` rows of one race: one per variant against the baseline, with the row's fields
    (the variant's case, the config), the build's Python and transformers, the paired samples, the
    between-step medians and, with --profile, the variant's breakdown (``profiles``, by case)."""
    medians = record["generation_median_s"]
    between = record.get("between_median_s") or {}
    found: list[RaceRow] = []
    for v in verdicts:
        error = v.error or {}
        profile = (profiles or {}).get(v.b)
        found.append(
            {
                "uid": race_uid,
                "started_at": started_at,
                **rows.columns(config, v.b, sources[v.b]),
                "baseline": v.a,
                "baseline_source": sources[v.a],
                "python": build.get("python"),
                "transformers_version": build.get("transformers_version"),
                "rounds": v.rounds,
                "ms_baseline": v.ms_a,
                "ms_case": v.ms_b,
                "ratio": v.ratio,
                "low": v.low,
                "high": v.high,
                "verdict": v.verdict,
                "failed": v.failed,
                "error_type": error.get("error_type"),
                "error_message": error.get("error_message"),
                "error_location": error.get("error_location"),
                "threads": record.get("threads"),
                "load_1m": record.get("load_1m"),
                "cpus": record.get("cpus"),
                "seconds": record.get("seconds"),
                "samples": json.dumps({"baseline": medians.get(v.a, []), "case": medians.get(v.b, [])}),
                "between_ms_baseline": between_ms(between, v.a),
                "between_ms_case": between_ms(between, v.b),
                "profile": json.dumps(profile) if profile is not None else None,
            }
        )
    return found


def between_ms(between: dict[str, list[float]], case: str) -> Optional[float]:
    """A variant's between-step time (ms): the median over its timed generations' medians."""
    samples = between.get(case) or []
    return statistics.median(samples) * 1e3 if samples else None
