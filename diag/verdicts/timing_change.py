"""How a timing moved between two pools of runs (one side a build or invocation, the other the next):
the figure each run gives (its host-adjusted decode step, its compile time, its guard check), the
ratio of the sides' medians and the one-sided rank test over the runs. Pure: no I/O.

``regress.py`` turns these changes into verdicts against thresholds.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence

from diag import figure
from diag.stats import mann_whitney_greater, quantile, runs_needed
from diag.store.typed import StoredRun


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
    # a count (instructions), not a time: it does not wait for the machine, so one run a side is
    # judged on its ratio alone (bench/instructions.py measures its spread over repeats)
    exact: bool = False

    def beyond(self, threshold: float) -> bool:
        return self.ratio is not None and self.ratio > threshold

    def judgeable(self, alpha: float) -> bool:
        """Enough runs on both sides for the rank test to reach ``alpha`` (any, for a count)."""
        return self.exact or min(self.runs_before, self.runs_after) >= runs_needed(alpha)

    def significant_slowdown(self, threshold: float, alpha: float) -> bool:
        if self.exact:
            return self.beyond(threshold)
        return self.beyond(threshold) and self.judgeable(alpha) and self.p_value is not None and self.p_value < alpha

    def inconclusive(self, threshold: float, alpha: float) -> bool:
        """A ratio beyond the threshold that too few runs cannot confirm or dismiss."""
        return self.beyond(threshold) and not self.judgeable(alpha)


def numbers(runs: Iterable[Mapping[str, Any]], name: str) -> list[float]:
    """The values of the numeric column ``name`` over ``runs``, those that are None left out."""
    return [float(value) for run in runs if (value := run.get(name)) is not None]


def timing_change(metric: str, before: Sequence[float], after: Sequence[float]) -> TimingChange:
    """A metric with one value per run (compile time): medians, their ratio and the rank test."""
    before_median = statistics.median(before) if before else None
    after_median = statistics.median(after) if after else None
    ratio = after_median / before_median if before_median and after_median is not None else None
    return TimingChange(
        metric,
        before_median,
        after_median,
        ratio,
        mann_whitney_greater(after, before),
        runs_before=len(before),
        runs_after=len(after),
    )


HOST_SMOOTHING = 2  # a generation's yardstick: the median host reference of it and 2 neighbours each side
ADJUSTED_QUANTILE = 0.2  # of a run's host-adjusted generations: the host's faster stretches


def host_adjusted(run: StoredRun, mode: str) -> Optional[list[float]]:
    """Per timed generation: its median decode step over the host references around it; None for a
    run that cannot be adjusted (not on CPU, or stored before the timing pass timed the host)."""
    steps, host = samples_of(run, mode), samples_of(run, mode, "host_reference")
    if run.get("device") != "cpu" or not steps or not host or len(steps) % len(host):
        return None
    per = len(steps) // len(host)
    return [
        statistics.median(steps[i * per : (i + 1) * per])
        / statistics.median(host[max(0, i - HOST_SMOOTHING) : i + HOST_SMOOTHING + 1])
        for i in range(len(host))
    ]


def run_summaries(
    mode: str, one: Sequence[StoredRun], other: Sequence[StoredRun]
) -> tuple[list[float], list[float], str]:
    """One latency summary per run of two sides (every run has samples of ``mode``), and its basis:
    host-adjusted where every run on both sides can be and all ran the same Python (the yardstick is
    pure Python), else each run's median step in seconds."""
    runs = [*one, *other]
    adjusted = [values for r in runs if (values := host_adjusted(r, mode)) is not None]
    if len(adjusted) == len(runs) and len({r.get("python") for r in runs}) == 1:
        summaries = [quantile(values, ADJUSTED_QUANTILE) for values in adjusted]
        basis = "host-adjusted"
    else:
        summaries = [statistics.median(samples_of(r, mode)) for r in runs]
        basis = "raw"
    return summaries[: len(one)], summaries[len(one) :], basis


def latency_change(
    mode: str, before_runs: Sequence[StoredRun], after_runs: Sequence[StoredRun]
) -> Optional[TimingChange]:
    """Per-token latency of ``mode`` over the runs of one row on each side; None where a side has no samples.

    Each run gives one summary: host-adjusted where every run on both sides can be and all ran
    the same Python (the yardstick is pure Python), else its median step in seconds. A side's
    estimate is the median of its runs' summaries, and the rank test is over those summaries.
    """
    before_runs = [r for r in before_runs if samples_of(r, mode)]
    after_runs = [r for r in after_runs if samples_of(r, mode)]
    if not before_runs or not after_runs:
        return None
    before, after, basis = run_summaries(mode, before_runs, after_runs)
    before_median, after_median = statistics.median(before), statistics.median(after)
    return TimingChange(
        f"{mode}_s_per_token",
        before_median,
        after_median,
        after_median / before_median if before_median else None,
        mann_whitney_greater(after, before),
        basis,
        len(before_runs),
        len(after_runs),
    )


def samples_of(run: StoredRun, mode: str, metric: str = "decode_step") -> list[float]:
    return next((t["samples"] or [] for t in run.get("timings", []) if t["mode"] == mode and t["metric"] == metric), [])


def timed_and_steady(runs: Sequence[StoredRun], mode: str) -> tuple[list[StoredRun], list[StoredRun]]:
    """The runs with latency samples of ``mode``, and of those the ones whose timing was not noisy
    (diag/noise.py): only these give a latency verdict."""
    timed = [r for r in runs if samples_of(r, mode)]
    return timed, [r for r in timed if not figure.timing_noisy(r)]


def guard_change(before_runs: Sequence[StoredRun], after_runs: Sequence[StoredRun]) -> Optional[TimingChange]:
    """The guard check a decode call pays, one value per run, on each side; None where a side has
    none. Runs whose timing the host made noisy are left out, as they are for latency."""
    sides = [
        numbers([r for r in runs if not figure.timing_noisy(r)], "guard_latency_us")
        for runs in (before_runs, after_runs)
    ]
    if not all(sides):
        return None
    change = timing_change("guard_latency_us", sides[0], sides[1])
    change.basis = "raw"
    return change


def compile_change(before_runs: Sequence[StoredRun], after_runs: Sequence[StoredRun]) -> Optional[TimingChange]:
    """Compile time, one value per run, on each side; None where a side has none.

    On CPU it is divided by the host reference the timing pass took right after the first compiled
    generations (the compile's own stretch of the host's speed), where every run on both sides has
    one and all ran the same Python, as latency is: a compile is mostly Python, and an A/A pair on a
    host that changed speed between its sides moved raw compile time by x1.5.
    """
    # a compile that waited for a busy machine says nothing of the build
    before_runs = [r for r in before_runs if figure.compile_time(r).comparable]
    after_runs = [r for r in after_runs if figure.compile_time(r).comparable]
    if not before_runs or not after_runs:
        return None
    runs = [*before_runs, *after_runs]
    hosts = [samples_of(r, "compiled", "host_reference")[: HOST_SMOOTHING + 1] for r in runs]
    if all(r.get("device") == "cpu" for r in runs) and all(hosts) and len({r.get("python") for r in runs}) == 1:
        values, basis = [s / statistics.median(h) for s, h in zip(numbers(runs, "compile_s"), hosts)], "host-adjusted"
    else:
        values, basis = numbers(runs, "compile_s"), "raw"
    change = timing_change("compile_s", values[: len(before_runs)], values[len(before_runs) :])
    change.basis = basis
    return change


def instruction_change(before_runs: Sequence[StoredRun], after_runs: Sequence[StoredRun]) -> Optional[TimingChange]:
    """The cold compile's instruction count, one per run, on each side; None where a side has none.

    Only counts of one method are compared (the after side's newest run's): the CPU's counter and
    callgrind count the same program a little differently. A count is judged on its ratio alone
    (``exact``): it does not depend on the machine's load.
    """
    counted = [r for r in after_runs if r.get("compile_instructions")]
    if not counted:
        return None
    method = counted[-1].get("instructions_method")
    sides = [
        [
            float(r.get("compile_instructions") or 0)
            for r in runs
            if r.get("compile_instructions") and r.get("instructions_method") == method
        ]
        for runs in (before_runs, after_runs)
    ]
    if not all(sides):
        return None
    change = timing_change("compile_instructions", sides[0], sides[1])
    change.basis, change.exact = str(method), True
    return change
