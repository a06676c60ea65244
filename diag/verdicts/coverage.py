"""What a comparison judged and what it could not, figure by figure, and why: the lines ``diag check``
and ``diag compare`` end with, so that "no regressions" never stands for "nothing could be judged".
Pure: no I/O.

A row is judged on a figure where both sides have it and a verdict can be given: the status and the
finding keys wherever neither side's case is broken; a time (latency per mode, compile time, the
guard check) where each side has a steady run and enough runs for the rank test at the gate's alpha
(``stats.runs_needed``); the instruction count wherever each side counted one (a count needs no
test). A figure no row has on either side is left out, not listed as 0 of n.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

from diag import figure
from diag.stats import runs_needed
from diag.store.typed import StoredRun, column
from diag.verdicts.regress import RowComparison
from diag.verdicts.timing_change import TimingChange, samples_of

BROKEN = "the case is broken on a side"
# why a time leaves a run out (regress.compare_runs counts them): what its figure cannot be trusted with
LEFT_OUT = {
    "eager latency": "noisy (its steps or host reference spread, or its median's interval too wide)",
    "compiled latency": "noisy (its steps or host reference spread, or its median's interval too wide)",
    "compile time": "the compile waited for a CPU (shared cores)",
}


def left_out_text(figure: str, count: int) -> str:
    """``3 runs left out: noisy (...)``: the runs a figure left out, and why (``LEFT_OUT``)."""
    return f"{count} run{'' if count == 1 else 's'} left out: {LEFT_OUT.get(figure, 'untrustworthy')}"


@dataclass
class Coverage:
    figure: str
    rows: int  # rows with runs on both sides
    judged: int = 0
    why_not: dict[str, int] = field(default_factory=dict)  # reason -> rows
    left_out: int = 0  # runs of the rows a time left out, as untrustworthy (LEFT_OUT says why)

    def add(self, reason: Optional[str]) -> None:
        if reason is None:
            self.judged += 1
        else:
            self.why_not[reason] = self.why_not.get(reason, 0) + 1

    def line(self) -> str:
        said = f"{self.figure}: {self.judged} of {self.rows} row{'' if self.rows == 1 else 's'} judged"
        reasons = [f"{count} {reason}" for reason, count in sorted(self.why_not.items(), key=lambda item: -item[1])]
        dropped = f"; {left_out_text(self.figure, self.left_out)}" if self.left_out else ""
        return said + ("; not judged: " + "; ".join(reasons) if reasons else "") + dropped

    def as_dict(self) -> dict[str, Any]:
        why = LEFT_OUT.get(self.figure, "untrustworthy") if self.left_out else None
        return {**asdict(self), "left_out_why": why, "line": self.line()}


def _of_time(change: Optional[TimingChange], alpha: float, missing: str) -> Optional[str]:
    """Why a time was not judged (``TimingChange.judgeable``), None where it was."""
    if change is None:
        return missing
    if change.judgeable(alpha):
        return None
    fewest, needed = min(change.runs_before, change.runs_after), runs_needed(alpha)
    return (
        f"with {fewest} run{'' if fewest == 1 else 's'} a side, a verdict needs {needed} (diag run --repeat {needed})"
    )


def _change(comparison: RowComparison, metric: str) -> Optional[TimingChange]:
    return next((t for t in comparison.timings if t.metric == metric), None)


def _latency(mode: str, alpha: float) -> Callable[[RowComparison], Optional[str]]:
    def why(comparison: RowComparison) -> Optional[str]:
        if any(said.startswith(f"{mode} latency") for said in comparison.noisy):
            return "with every run of a side noisy (rerun on a quieter machine)"
        return _of_time(_change(comparison, f"{mode}_s_per_token"), alpha, "not timed on a side (--no-timing)")

    return why


def _compile(alpha: float) -> Callable[[RowComparison], Optional[str]]:
    def why(comparison: RowComparison) -> Optional[str]:
        sides = [run for run in (comparison.before, comparison.after) if run is not None]
        if all(run.get("compile_s") is not None for run in sides) and any(figure.compile_waited(run) for run in sides):
            missing = "with the compile waiting for the machine on a side"
        else:
            missing = "not timed on a side (--no-timing)"
        return _of_time(_change(comparison, "compile_s"), alpha, missing)

    return why


def _has(name: str) -> Callable[[StoredRun], bool]:
    return lambda run: column(run, name) is not None


def _timed(mode: str) -> Callable[[StoredRun], bool]:
    return lambda run: bool(samples_of(run, mode)) or column(run, f"{mode}_ms_per_token") is not None


def coverage(comparisons: list[RowComparison], alpha: float) -> list[Coverage]:
    """A line's worth per figure over the rows with runs on both sides."""
    both = [c for c in comparisons if c.before is not None and c.after is not None]
    figures: list[tuple[str, Callable[[StoredRun], bool], Callable[[RowComparison], Optional[str]]]] = [
        ("status and findings", lambda run: True, lambda c: None),
        ("eager latency", _timed("eager"), _latency("eager", alpha)),
        ("compiled latency", _timed("compiled"), _latency("compiled", alpha)),
        ("compile time", _has("compile_s"), _compile(alpha)),
        (
            "guard check",
            _has("guard_latency_us"),
            lambda c: _of_time(_change(c, "guard_latency_us"), alpha, "not measured on a side"),
        ),
        (
            "compile instructions",
            _has("compile_instructions"),
            lambda c: _of_time(_change(c, "compile_instructions"), alpha, "not counted on a side"),
        ),
    ]
    found = []
    for name, present, why in figures:
        if not any(present(run) for c in both for run in (c.before, c.after) if run is not None):
            continue
        covered = Coverage(name, len(both))
        for comparison in both:
            covered.add(BROKEN if comparison.note else why(comparison))
            covered.left_out += comparison.left_out.get(name, 0)
        found.append(covered)
    return found
