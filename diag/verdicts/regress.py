"""Comparisons between runs and builds, and the regression verdicts of ``diag check``. Pure: no I/O.

Discrete findings (status, keys, token equality) are compared exactly, deciding run against
deciding run (``row.deciding_run``: the worst of a side's runs, whatever order they were stored in).
Timings are judged over runs: each run of a row gives one summary (its per-token latency, its
compile time), and a slowdown needs both a ratio of the sides' medians beyond the threshold and a
one-sided Mann-Whitney U test over the runs' summaries at level alpha (exact for small samples).
The steps of one run share the host's state, so they are not independent draws; the runs are.

With fewer runs a side than the test can use (an exact rank test over n runs against n
cannot go below 1 / C(2n, n): 4 runs a side for the default alpha 0.02, 5 for 0.01), a
ratio beyond the threshold is *inconclusive*, never a regression.

Per-token latency of CPU runs is host-adjusted: each timed generation's decode
steps are divided by the pure-Python host references timed around it (see
diag/probe/timing.py), and a run is summarised by a low quantile of those values.
A shared VM can change speed for seconds at a time, by up to 2x; a raw comparison
of two runs reads that as a change in torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from diag import figure
from diag import row as rows
from diag.contract import FINDING_KINDS, WORKS, statuses
from diag.noise import NOT_COMPARED
from diag.stats import runs_needed
from diag.store.typed import StoredRun, children
from diag.verdicts.timing_change import (
    TimingChange,
    compile_change,
    guard_change,
    instruction_change,
    latency_change,
    timed_and_steady,
)
from diag.verdicts.why import kernel_change


@dataclass
class RowComparison:
    row: rows.Row
    before: Optional[StoredRun]
    after: Optional[StoredRun]
    added: dict[str, list[str]] = field(default_factory=dict)
    removed: dict[str, list[str]] = field(default_factory=dict)
    timings: list[TimingChange] = field(default_factory=list)
    note: Optional[str] = None  # why the row was not compared, where it was not
    noisy: list[str] = field(default_factory=list)  # latency left unjudged: every run of a side was noisy
    # per figure (coverage's names), the runs of either side a time left out: noisy, or a compile that waited
    left_out: dict[str, int] = field(default_factory=dict)

    @property
    def status_change(self) -> Optional[tuple[str, str]]:
        if self.before and self.after and self.before["status"] != self.after["status"]:
            return self.before["status"] or "", self.after["status"] or ""
        return None

    @property
    def error_change(self) -> Optional[tuple[Optional[str], Optional[str]]]:
        """The run's own error on each side (type and first line), where it differs: a compile that
        fails on both sides, but now for another reason, is a change even when the status holds."""
        if self.before and self.after and error_text(self.before) != error_text(self.after):
            return error_text(self.before), error_text(self.after)
        return None

    @property
    def note_change(self) -> Optional[tuple[Optional[str], Optional[str]]]:
        """What the case noted of how it ran (a fallback it took) on each side, where that differs."""
        if self.before and self.after and self.before.get("case_note") != self.after.get("case_note"):
            return self.before.get("case_note"), self.after.get("case_note")
        return None

    @property
    def kernel_change(self) -> Optional[tuple[str, str]]:
        """The SDPA kernels the two sides' profiled runs ran, where they differ (diag run --profile)."""
        return kernel_change(self.before, self.after) if self.before and self.after else None

    def key_text(self, table: str, key: str) -> str:
        """What a finding key stands for, from the side that has it: gb_type, else reason or message."""
        for run in (self.after, self.before):
            for item in children(run or {}, table):
                if item.get("key") == key:
                    said = (item.get("gb_type") or item.get("reason") or item.get("message") or "").strip()
                    return _first_line(said, 120)
        return ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "row": rows.label(self.row),
            "before_run": self.before and self.before["id"],
            "after_run": self.after and self.after["id"],
            "status_before": self.before and self.before["status"],
            "status_after": self.after and self.after["status"],
            "error_before": self.before and error_text(self.before),
            "error_after": self.after and error_text(self.after),
            "case_note_before": self.before and self.before.get("case_note"),
            "case_note_after": self.after and self.after.get("case_note"),
            "attention_kernels": self.kernel_change,
            "key_texts": {
                table: {
                    key: self.key_text(table, key) for key in [*self.added.get(table, []), *self.removed.get(table, [])]
                }
                for table in set(self.added) | set(self.removed)
            },
            "added": self.added,
            "removed": self.removed,
            "timings": [t.__dict__ for t in self.timings],
            "note": self.note,
            "noisy": self.noisy,
        }


def not_a_finding(run: StoredRun) -> bool:
    """A run whose status says nothing of the compiler (a broken case): never a regression or a fix."""
    return run.get("status") in statuses.NOT_A_FINDING


def _first_line(text: Optional[str], limit: int) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def error_text(run: StoredRun) -> Optional[str]:
    """A run's own error as ``Type: first line of its message``; None when it raised nothing."""
    if not run.get("error_type"):
        return None
    message = _first_line((run.get("error_message") or "").strip(), 200)
    return f"{run['error_type']}: {message}" if message else run["error_type"]


def compare_runs(
    before: Optional[StoredRun],
    after: Optional[StoredRun],
    before_pool: Sequence[StoredRun] = (),
    after_pool: Sequence[StoredRun] = (),
) -> RowComparison:
    """Full run records (with child rows) of one row on two sides: findings from the newest run of
    each, timings over each side's pool of runs (default: that one run)."""
    ran = after or before
    assert ran is not None, "a comparison needs a run on one side at least"
    result = RowComparison(rows.of(ran), before, after)
    if before is None or after is None:
        return result
    broken = [(side, run) for side, run in (("before", before), ("after", after)) if not_a_finding(run)]
    if broken:
        side, run = broken[0]
        said = error_text(run)
        result.note = (
            f"not compared: the case is broken {side} ({run['status']}{': ' + said if said else ''}), "
            "not a compiler finding"
        )
        return result
    for kind in FINDING_KINDS:
        keys_before = {item["key"] for item in children(before, kind.table)}
        keys_after = {item["key"] for item in children(after, kind.table)}
        result.added[kind.table] = sorted(keys_after - keys_before)
        result.removed[kind.table] = sorted(keys_before - keys_after)
    before_pool, after_pool = list(before_pool) or [before], list(after_pool) or [after]
    for mode in ("eager", "compiled"):
        (timed_before, steady_before), (timed_after, steady_after) = (
            timed_and_steady(pool, mode) for pool in (before_pool, after_pool)
        )
        dropped = len(timed_before) + len(timed_after) - len(steady_before) - len(steady_after)
        if dropped:
            result.left_out[f"{mode} latency"] = dropped
        if timed_before and timed_after and not (steady_before and steady_after):
            noisy = [r for r in (*timed_before, *timed_after) if figure.timing_noisy(r)]
            result.noisy.append(
                f"{mode} latency {NOT_COMPARED}: {len(noisy)} of {len(timed_before) + len(timed_after)} runs noisy "
                f"({figure.timing_why(noisy[0]) if noisy else 'timing noisy'})"
            )
            continue
        change = latency_change(mode, steady_before, steady_after)
        if change is not None:
            result.timings.append(change)
    waited = sum(1 for run in (*before_pool, *after_pool) if figure.compile_waited(run))
    if waited:
        result.left_out["compile time"] = waited
    for change in (
        compile_change(before_pool, after_pool),
        guard_change(before_pool, after_pool),
        instruction_change(before_pool, after_pool),
    ):
        if change is not None:
            result.timings.append(change)
    return result


@dataclass(frozen=True, kw_only=True)  # by name only: a field added in the middle cannot shift the others
class Thresholds:
    compile_ratio: float = 1.15
    latency_ratio: float = 1.05
    guard_ratio: float = 1.15  # guard latency is one figure a run, measured once per compile, as compile time
    # 0.02, not 0.01: over 5 runs a side 0.01 tolerates one stray run, and missed 3 of 20 injected
    # 10% slowdowns; 0.02 detected 19 of 20 with no false alarm on identical builds, where the
    # ratio threshold, not the test, does the refusing (docs/BENCHMARKS.md, timing fidelity).
    alpha: float = 0.02
    # decode steps that may recompile: the first one (its shapes are not the prefill's) and one more
    # (torch marks a size that changed as dynamic); a cache that recompiles beyond is a finding
    decode_recompile_steps: int = 2
    # the cold compile's instruction count: 2%, above the 1% spread the target allows and below the
    # 3% increase it must catch; bench/instructions.py measures both (docs/BENCHMARKS.md)
    instructions_ratio: float = 1.02

    def limit(self, metric: str) -> float:
        """The ratio a slowdown of ``metric`` must pass."""
        return {
            "compile_s": self.compile_ratio,
            "guard_latency_us": self.guard_ratio,
            "compile_instructions": self.instructions_ratio,
        }.get(metric, self.latency_ratio)


@dataclass
class Regression:
    row: rows.Row
    kind: str  # one of KINDS
    message: str
    change: Optional[TimingChange] = None  # the timing change behind a slowdown
    # the comparison that found it: its two runs (a row may be compared on two variants' builds)
    found_in: Optional[RowComparison] = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"regression kind {self.kind!r} is not one of regress.KINDS")


# Every kind of verdict check reports per row, with what it means: the one list (docs/regressions.md
# names each; a test holds the two together).
KINDS = {
    "status": "the row worked on the baseline and fails now",
    "new_key": "a graph-break, recompile or hidden-error key the baseline did not have",
    "decode_recompiles": "decode steps recompile beyond the allowed number, where the baseline stayed within it",
    "second_call_recompiles": "a second generate call recompiles, where the baseline's did not",
    "tokens": "compiled tokens no longer match eager",
    "attention_kernel": "the SDPA kernels a profiled run ran (diag run --profile) are not the baseline's: "
    "a mask, dtype or shape that now keeps attention off its fused kernel, or a new one",
    "fallback": "the case notes a fallback the baseline did not take (Generation.note): what it measures "
    "now is not what its name promises, as an hf case decoding without the static cache",
    "slowdown": "a significant slowdown beyond the threshold (latency, compile time, guard time), or a "
    "compile instruction count beyond its threshold",
    "inconclusive": "a slowdown beyond the threshold with too few runs a side to judge",
    "host_changed": "a slowdown the stable twin shared the same night: the runner's, not torch's",
}


def _timing_text(change: TimingChange) -> str:
    return (
        f"{change.metric} x{change.ratio:.3f} ({change.basis} {change.before_median:.6g} -> "
        f"{change.after_median:.6g}, runs {change.runs_before} -> {change.runs_after}"
    )


def inconclusive(comparison: RowComparison, thresholds: Thresholds) -> list[Regression]:
    """Slowdowns beyond a threshold that too few runs cannot judge: neither a regression nor a pass."""
    found: list[Regression] = []
    if comparison.before is None or comparison.after is None:
        return found
    needed = runs_needed(thresholds.alpha)
    for change in comparison.timings:
        limit = thresholds.limit(change.metric)
        if change.inconclusive(limit, thresholds.alpha):
            found.append(
                Regression(
                    comparison.row,
                    "inconclusive",
                    f"inconclusive: {_timing_text(change)}): {change.runs_before} -> "
                    f"{change.runs_after} runs a side, need {needed} (diag run --repeat {needed})",
                )
            )
    return found


def regressions(comparison: RowComparison, thresholds: Thresholds, allowed: set[str]) -> list[Regression]:
    """What makes ``diag check`` fail for one row."""
    found: list[Regression] = []
    before, after, row = comparison.before, comparison.after, comparison.row
    if before is None or after is None or not_a_finding(before) or not_a_finding(after):
        return found
    if before["status"] in WORKS and after["status"] not in WORKS:
        detail = f": {after.get('error_type')}" if after.get("error_type") else ""
        detail += f" [key {after['error_key']}]" if after.get("error_key") else ""
        found.append(Regression(row, "status", f"status {before['status']} -> {after['status']}{detail}"))
    for kind in FINDING_KINDS:
        for key in comparison.added.get(kind.table, []):
            if key not in allowed:
                said = comparison.key_text(kind.table, key)
                found.append(Regression(row, "new_key", f"new {kind.label} key {key}" + (f" ({said})" if said else "")))
    steps = thresholds.decode_recompile_steps
    if (after.get("decode_recompile_steps") or 0) > steps >= (before.get("decode_recompile_steps") or 0):
        steps = max(0, (after.get("new_tokens") or 1) - 1)
        found.append(
            Regression(
                row,
                "decode_recompiles",
                f"decode recompiles on {after['decode_recompile_steps']} of {steps} decode steps "
                f"(was {before.get('decode_recompile_steps') or 0}; more than {steps} allowed)",
            )
        )
    if (after.get("second_call_recompiles") or 0) > 0 and before.get("second_call_recompiles") == 0:
        found.append(
            Regression(
                row,
                "second_call_recompiles",
                f"a second generate call recompiles {after['second_call_recompiles']} times (was 0): "
                "every call of a served model would",
            )
        )
    if before.get("tokens_equal") == 1 and after.get("tokens_equal") == 0:
        found.append(
            Regression(
                row,
                "tokens",
                f"compiled tokens no longer match eager (first differing step {after.get('first_differing_step')})",
            )
        )
    if comparison.kernel_change is not None:
        was, now = comparison.kernel_change
        found.append(Regression(row, "attention_kernel", f"attention kernels changed: {was} -> {now}"))
    if after.get("case_note") and not before.get("case_note"):
        found.append(Regression(row, "fallback", f"the case now says: {_first_line(after['case_note'], 300)}"))
    for change in comparison.timings:
        limit = thresholds.limit(change.metric)
        if change.significant_slowdown(limit, thresholds.alpha):
            said = f"{_timing_text(change)}, p={change.p_value:.2g}, threshold x{limit})"
            found.append(Regression(row, "slowdown", said, change))
    for regression in found:
        regression.found_in = comparison
    return found


def against_stable(
    found: list[Regression],
    stable: dict[tuple[rows.Row, str], TimingChange],
    stable_version: str,
    thresholds: Thresholds,
) -> tuple[list[Regression], list[Regression]]:
    """Slowdowns of the nightly set against the stable leg's change over the same nights (its newest
    invocation against the one before, on the same runner): where the stable build moved beyond the
    threshold too, the host changed, and only a slowdown beyond the stable leg's own ratio is torch's.
    Returns (regressions kept, host changes)."""
    kept, host = [], []
    for regression in found:
        change = regression.change
        twin = stable.get((regression.row, change.metric)) if change is not None else None
        limit = thresholds.limit(change.metric) if change is not None else thresholds.latency_ratio
        if change is None or change.ratio is None or twin is None or twin.ratio is None or twin.ratio <= limit:
            kept.append(regression)
            continue
        beyond = change.ratio / twin.ratio
        moved = f"stable {stable_version} moved x{twin.ratio:.3f} the same night"
        if beyond > limit:
            kept.append(
                Regression(
                    regression.row,
                    "slowdown",
                    f"{regression.message}; {moved}, x{beyond:.3f} beyond it",
                    change,
                    regression.found_in,
                )
            )
        else:
            said = f"host changed: {change.metric} x{change.ratio:.3f} on the nightly, {moved}"
            host.append(Regression(regression.row, "host_changed", said, change))
    return kept, host
