"""Comparisons between runs and builds, and the regression verdicts of ``diag check``. Pure: no I/O.

Discrete findings (status, keys, token equality) are compared exactly, newest run
against newest run. Timings pool every run of a row on each side (a build's runs,
or one ``diag run`` invocation's) and need both a ratio beyond the threshold and a
one-sided Mann-Whitney U (normal approximation with tie correction, as asv does).

Per-token latency of CPU runs is host-adjusted: each timed generation's decode
steps are divided by the pure-Python host references timed around it (see
diag/probe/timing.py), and a run is summarised by a low quantile of those values.
A shared VM can change speed for seconds at a time, by up to 2x; a raw comparison
of two runs reads that as a change in torch.

The rank test pools the samples of every run, but the steps of one run share the
host's state and are not independent draws, so its p-value is optimistic; the
ratio threshold carries the decision. A test over runs would be the honest unit,
and cannot reach p < 0.01 with fewer than 5 runs a side.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from diag import row as rows
from diag.probe.statuses import FINDING_KINDS, WORKS

_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


def version_order(build: dict[str, Any]) -> tuple:
    """Releases and nightlies in one order: 2.1.0.dev20230621 < 2.1.0 < 2.1.1 < 2.2.0.dev..."""
    version = build.get("version") or ""
    match = _VERSION.match(version)
    numbers = tuple(int(n or 0) for n in match.groups()) if match else (0, 0, 0)
    is_release = ".dev" not in version
    return (*numbers, is_release, build.get("nightly_date") or "", version, build["id"])


def mann_whitney_greater(after: Sequence[float], before: Sequence[float]) -> Optional[float]:
    """One-sided p-value that ``after`` tends to be larger than ``before``; None with too few samples."""
    n1, n2 = len(after), len(before)
    if n1 < 3 or n2 < 3:
        return None
    pooled = sorted([(v, 0) for v in after] + [(v, 1) for v in before])
    ranks = [0.0] * len(pooled)
    ties = 0.0
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        rank = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[k] = rank
        size = j - i + 1
        ties += size ** 3 - size
        i = j + 1
    rank_sum = sum(r for r, (_, group) in zip(ranks, pooled) if group == 0)
    u = rank_sum - n1 * (n1 + 1) / 2
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:
        return 1.0
    z = (u - n1 * n2 / 2 - 0.5) / math.sqrt(variance)  # continuity correction
    return 0.5 * math.erfc(z / math.sqrt(2))


@dataclass
class TimingChange:
    metric: str
    before_median: Optional[float]  # the side's estimate: see basis
    after_median: Optional[float]
    ratio: Optional[float]
    p_value: Optional[float]
    basis: str = "raw"  # raw: median seconds | host-adjusted: low quantile, in host references
    runs_before: int = 1
    runs_after: int = 1

    def significant_slowdown(self, threshold: float, alpha: float) -> bool:
        return (self.ratio is not None and self.ratio > threshold and self.p_value is not None
                and self.p_value < alpha)


def timing_change(metric: str, before: Sequence[float], after: Sequence[float]) -> TimingChange:
    """A metric with one value per run (compile time): medians, their ratio and the rank test."""
    before_median = statistics.median(before) if before else None
    after_median = statistics.median(after) if after else None
    ratio = after_median / before_median if before_median and after_median is not None else None
    return TimingChange(metric, before_median, after_median, ratio, mann_whitney_greater(after, before),
                        runs_before=len(before), runs_after=len(after))


HOST_SMOOTHING = 2  # a generation's yardstick: the median host reference of it and 2 neighbours each side
ADJUSTED_QUANTILE = 0.2  # of a run's host-adjusted generations: the host's faster stretches


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def host_adjusted(run: dict[str, Any], mode: str) -> Optional[list[float]]:
    """Per timed generation: its median decode step over the host references around it; None for a
    run that cannot be adjusted (not on CPU, or stored before the timing pass timed the host)."""
    steps, host = samples_of(run, mode), samples_of(run, mode, "host_reference")
    if run.get("device") != "cpu" or not steps or not host or len(steps) % len(host):
        return None
    per = len(steps) // len(host)
    return [statistics.median(steps[i * per:(i + 1) * per])
            / statistics.median(host[max(0, i - HOST_SMOOTHING):i + HOST_SMOOTHING + 1])
            for i in range(len(host))]


def latency_change(mode: str, before_runs: Sequence[dict[str, Any]],
                   after_runs: Sequence[dict[str, Any]]) -> Optional[TimingChange]:
    """Per-token latency of ``mode`` over the runs of one row on each side; None where a side has no samples.

    Each run gives one estimate: host-adjusted where every run on both sides can be and all ran
    the same Python (the yardstick is pure Python), else the median step in seconds. A side's
    estimate is the median of its runs'; the rank test pools the samples of all runs.
    """
    before_runs = [r for r in before_runs if samples_of(r, mode)]
    after_runs = [r for r in after_runs if samples_of(r, mode)]
    if not before_runs or not after_runs:
        return None
    runs = [*before_runs, *after_runs]
    adjusted = [host_adjusted(r, mode) for r in runs]
    if all(values is not None for values in adjusted) and len({r.get("python") for r in runs}) == 1:
        per_run, summary, basis = adjusted, (lambda v: quantile(v, ADJUSTED_QUANTILE)), "host-adjusted"
    else:
        per_run, summary, basis = [samples_of(r, mode) for r in runs], statistics.median, "raw"

    def side(values: list[list[float]]) -> tuple[float, list[float]]:
        return statistics.median(summary(v) for v in values), [x for v in values for x in v]

    (before, pooled_before), (after, pooled_after) = side(per_run[:len(before_runs)]), side(per_run[len(before_runs):])
    return TimingChange(f"{mode}_s_per_token", before, after, after / before if before else None,
                        mann_whitney_greater(pooled_after, pooled_before), basis, len(before_runs), len(after_runs))


@dataclass
class RowComparison:
    row: rows.Row
    before: Optional[dict[str, Any]]
    after: Optional[dict[str, Any]]
    added: dict[str, list[str]] = field(default_factory=dict)
    removed: dict[str, list[str]] = field(default_factory=dict)
    timings: list[TimingChange] = field(default_factory=list)

    @property
    def status_change(self) -> Optional[tuple[str, str]]:
        if self.before and self.after and self.before["status"] != self.after["status"]:
            return self.before["status"], self.after["status"]
        return None

    def as_dict(self) -> dict[str, Any]:
        return {
            "row": rows.label(self.row),
            "before_run": self.before and self.before["id"], "after_run": self.after and self.after["id"],
            "status_before": self.before and self.before["status"],
            "status_after": self.after and self.after["status"],
            "added": self.added, "removed": self.removed,
            "timings": [t.__dict__ for t in self.timings],
        }


def samples_of(run: dict[str, Any], mode: str, metric: str = "decode_step") -> list[float]:
    return next((t["samples"] for t in run.get("timings", []) if t["mode"] == mode and t["metric"] == metric), [])


def compare_runs(before: Optional[dict[str, Any]], after: Optional[dict[str, Any]],
                 before_pool: Sequence[dict[str, Any]] = (), after_pool: Sequence[dict[str, Any]] = ()) -> RowComparison:
    """Full run records (with child rows) of one row on two sides: findings from the newest run of
    each, timings over each side's pool of runs (default: that one run)."""
    row = rows.of(after or before)
    result = RowComparison(row, before, after)
    if before is None or after is None:
        return result
    for kind in FINDING_KINDS:
        keys_before = {item["key"] for item in before.get(kind.table, [])}
        keys_after = {item["key"] for item in after.get(kind.table, [])}
        result.added[kind.table] = sorted(keys_after - keys_before)
        result.removed[kind.table] = sorted(keys_before - keys_after)
    before_pool, after_pool = list(before_pool) or [before], list(after_pool) or [after]
    for mode in ("eager", "compiled"):
        change = latency_change(mode, before_pool, after_pool)
        if change is not None:
            result.timings.append(change)
    compile_before = [r["compile_s"] for r in before_pool if r.get("compile_s") is not None]
    compile_after = [r["compile_s"] for r in after_pool if r.get("compile_s") is not None]
    if compile_before and compile_after:
        result.timings.append(timing_change("compile_s", compile_before, compile_after))
    return result


@dataclass(frozen=True)
class Thresholds:
    compile_ratio: float = 1.15
    latency_ratio: float = 1.05
    alpha: float = 0.01


@dataclass
class Regression:
    row: rows.Row
    kind: str  # status | new_key | tokens | slowdown
    message: str


def regressions(comparison: RowComparison, thresholds: Thresholds, allowed: set[str]) -> list[Regression]:
    """What makes ``diag check`` fail for one row."""
    found: list[Regression] = []
    before, after, row = comparison.before, comparison.after, comparison.row
    if before is None or after is None:
        return found
    if before["status"] in WORKS and after["status"] not in WORKS:
        detail = f": {after.get('error_type')}" if after.get("error_type") else ""
        detail += f" [key {after['error_key']}]" if after.get("error_key") else ""
        found.append(Regression(row, "status", f"status {before['status']} -> {after['status']}{detail}"))
    for kind in FINDING_KINDS:
        for key in comparison.added.get(kind.table, []):
            if key not in allowed:
                found.append(Regression(row, "new_key", f"new {kind.label} key {key}"))
    if before.get("tokens_equal") == 1 and after.get("tokens_equal") == 0:
        found.append(Regression(row, "tokens", "compiled tokens no longer match eager "
                                               f"(first differing step {after.get('first_differing_step')})"))
    for change in comparison.timings:
        limit = thresholds.compile_ratio if change.metric == "compile_s" else thresholds.latency_ratio
        if change.significant_slowdown(limit, thresholds.alpha):
            found.append(Regression(row, "slowdown", f"{change.metric} x{change.ratio:.3f} "
                                                     f"({change.basis} {change.before_median:.6g} -> "
                                                     f"{change.after_median:.6g}, runs {change.runs_before} -> "
                                                     f"{change.runs_after}, p={change.p_value:.2g}, threshold x{limit})"))
    return found


def junit_xml(comparisons: list[RowComparison], found: list[Regression], suite: str) -> str:
    """JUnit XML: one test case per compared row, a failure element per regression."""
    from xml.sax.saxutils import escape, quoteattr

    by_row: dict[rows.Row, list[Regression]] = {}
    for regression in found:
        by_row.setdefault(regression.row, []).append(regression)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             f'<testsuite name={quoteattr(suite)} tests="{len(comparisons)}" failures="{len(by_row)}">']
    for comparison in comparisons:
        name = quoteattr(rows.label(comparison.row))
        failures = by_row.get(comparison.row, [])
        if not failures:
            lines.append(f"  <testcase classname=\"diag.check\" name={name}/>")
            continue
        lines.append(f"  <testcase classname=\"diag.check\" name={name}>")
        for regression in failures:
            lines.append(f"    <failure type={quoteattr(regression.kind)} message={quoteattr(regression.message)}>"
                         f"{escape(regression.message)}</failure>")
        lines.append("  </testcase>")
    lines.append("</testsuite>")
    return "\n".join(lines) + "\n"
