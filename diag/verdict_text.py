"""The terminal text of verdicts across stored runs: a row of ``diag compare``, what ``check`` judged and
its gate, a bisect's answer, and two variants point by point. Commands print what these return;
diag/text.py holds the text of single runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from diag import row as rows
from diag.contract import FINDING_KINDS
from diag.text import number, safe

if TYPE_CHECKING:
    from diag.verdicts.gate import Outcome
    from diag.verdicts.regress import RowComparison
    from diag.verdicts.timing_change import TimingChange


def timing_change(change: TimingChange) -> str:
    if change.ratio is None:
        return f"{change.metric} -"
    p = "n/a" if change.p_value is None else f"{change.p_value:.2g}"
    basis = "host-adjusted, " if change.basis == "host-adjusted" else ""
    pooled = (change.runs_before, change.runs_after) != (1, 1)
    runs = f"runs {change.runs_before} -> {change.runs_after}, " if pooled else ""
    return f"{change.metric} x{change.ratio:.3f} ({basis}{runs}p={p})"


def comparison_lines(comparison: RowComparison) -> list[str]:
    """One row of ``diag compare``: the status change, keys added and removed, the timing ratios."""
    before, after = comparison.before, comparison.after
    status = f"{before['status'] if before else 'absent'} -> {after['status'] if after else 'absent'}"
    lines = [f"{safe(rows.label(comparison.row))}: {status}"]
    if comparison.error_change:
        was, now = comparison.error_change
        lines.append(f"    error: {safe(was or '-')} -> {safe(now or '-')}")
    if comparison.note_change:
        was, now = comparison.note_change
        lines.append(f"    the case says: {safe(was or '-')} -> {safe(now or '-')}")
    if comparison.kernel_change:
        was, now = comparison.kernel_change
        lines.append(f"    attention kernels: {safe(was)} -> {safe(now)}")
    for kind in FINDING_KINDS:
        for sign, keys in (("+", comparison.added), ("-", comparison.removed)):
            for key in keys.get(kind.table, []):
                said = comparison.key_text(kind.table, key)
                lines.append(f"    {sign} {kind.label} {safe(key)}" + (f": {safe(said)}" if said else ""))
    if comparison.timings:
        lines.append("    " + "; ".join(timing_change(t) for t in comparison.timings))
    if comparison.note:
        lines.append(f"    {safe(comparison.note)}")
    lines += [f"    {safe(said)}" for said in comparison.noisy]
    return lines


def judged_lines(comparisons: list[RowComparison], alpha: Optional[float] = None) -> list[str]:
    """A line per figure: how many rows with runs on both sides were judged on it, and why not the rest."""
    from diag.verdicts.coverage import coverage
    from diag.verdicts.regress import Thresholds

    level = Thresholds().alpha if alpha is None else alpha
    return [f"judged: {safe(found.line())}" for found in coverage(comparisons, level)]


def cause_lines(outcome: Outcome) -> list[str]:
    """One block per cause, most rows first: what broke, whose it is, the rows it hit; each row's
    regressions under it. A regression no cause explains (a row with one side missing) stands alone."""
    lines, explained = [], set()
    for index, cause in enumerate(outcome.causes, 1):
        tracker = f", file at {cause.tracker}" if cause.tracker else ""
        lines.append(
            f"CAUSE {index} of {len(outcome.causes)}: {safe(cause.headline)}{tracker}: {cause.hit()} [cause {cause.id}]"
        )
        lines += [f"  {safe(cause.text)}"] if cause.text else []
        lines += [f"  moved beside it: {safe(', '.join(cause.moved.values()))}"] if cause.moved else []
        lines += [f"  REGRESSION {safe(rows.label(r.row))}: {safe(r.message)}" for r in cause.regressions]
        explained |= {id(r) for r in cause.regressions}
    rest = [r for r in outcome.regressions if id(r) not in explained]
    return lines + [f"REGRESSION {safe(rows.label(r.row))}: {safe(r.message)}" for r in rest]


def check_lines(outcome: Outcome, alpha: Optional[float] = None) -> list[str]:
    """``diag check``'s verdict: what was compared, each regression, what could not be judged, and
    per figure how many rows were judged and why the others were not (at the gate's ``alpha``)."""
    compared = [c for c in outcome.comparisons if c.before is not None and c.after is not None]
    lines = [
        f"checked: {outcome.description}; {len(outcome.comparisons)} rows, {len(compared)} with runs on both sides"
    ]
    lines += cause_lines(outcome)
    lines += [f"INCONCLUSIVE {safe(rows.label(r.row))}: {safe(r.message)}" for r in outcome.inconclusive]
    lines += [f"HOST CHANGED {safe(rows.label(r.row))}: {safe(r.message)}" for r in outcome.host_changed]
    lines += [f"NOT COMPARED {safe(rows.label(c.row))}: {safe(c.note)}" for c in outcome.comparisons if c.note]
    lines += [f"NOT COMPARED {safe(rows.label(c.row))}: {safe(said)}" for c in outcome.comparisons for said in c.noisy]
    lines += judged_lines(outcome.comparisons, alpha)
    if not compared:
        lines.append(
            "nothing to compare: no row has runs on both sides (run the matrix again, or on another build, then check)"
        )
    elif not outcome.regressions:
        lines.append("no regressions" + (" (some slowdowns could not be judged)" if outcome.inconclusive else ""))
    return lines


def _build_line(build: dict[str, Any]) -> str:
    date = f", nightly {build['nightly_date']}" if build["nightly_date"] else ""
    return f"{build['version']}{date}, git {build['git_version']} (run #{build['run']}: {build['status']})"


def _release_line(end: dict[str, Any]) -> str:
    package = end.get("package") or "transformers"
    return f"{safe(package)} {safe(end[package])} on torch {safe(end['version'])} (run #{end['run']}: {end['status']})"


def _judged_lines(summary: dict[str, Any]) -> list[str]:
    """What the builds were judged on, and how sure the answer is."""
    if "signal" not in summary:
        return []
    bad = summary["bad_values"]
    shown = sum(value != summary["good_value"] for value in bad)
    lines = [
        f"signal:    {safe(summary['signal'])}: good end {safe(summary['good_value'])}; the bad end differed in "
        f"{shown} of {len(bad)} runs"
    ]
    needed, miss = summary["runs_to_judge"], summary["miss"]
    if miss is None:
        sure = f"steady: one run judged each build; the last good build ran {summary['confirm']} more times"
    else:
        sure = (
            f"flaky: each build judged good agreed in {needed} runs; one that differs as rarely as the bad end "
            f"plausibly does passes them all with probability {miss:.1%}"
        )
    lines.append(f"sure:      {sure}")
    if summary.get("topped_up"):
        lines.append(
            f"confirmed: {', '.join(map(safe, summary['topped_up']))} judged good, then differed on a confirming run"
        )
    return lines


def bisect_lines(summary: dict[str, Any]) -> list[str]:
    """``diag bisect``'s answer: which side it moved, the last good and first bad build (or transformers
    release), the changes between, what was skipped."""
    line = _build_line if summary.get("moved", "torch") == "torch" else _release_line
    lines = [
        f"moved:     {summary.get('moved', 'torch')}"
        + (f" (torch {safe(summary['torch'])} fixed)" if summary.get("torch") else "")
    ]
    lines += _judged_lines(summary)
    lines += [f"last good: {line(summary['last_good'])}", f"first bad: {line(summary['first_bad'])}"]
    if summary["commit_range"] and summary.get("moved", "torch") in ("torch", "transformers"):
        lines.append(f"commits:   git log {summary['commit_range']}   ({summary['compare_url']})")
    elif summary["commit_range"]:
        lines.append(f"changes:   {safe(summary['commit_range'])}   (its release page: {summary['compare_url']})")
    lines += [f"skipped:   {spec}: not installed or not started, neither good nor bad ({safe(reason)})"
              for spec, reason in summary["skipped"].items()]  # fmt: skip
    if summary.get("reproduce"):
        lines.append(f"reproduce: {safe(summary['reproduce'])}")
    missing = summary["missing_dates"]
    if missing:
        more = " ..." if len(missing) > 10 else ""
        lines.append(f"no build:  {len(missing)} dates in range had no nightly ({', '.join(missing[:10])}{more})")
    return lines


def variant_lines(build: str, case_a: str, case_b: str, points: list) -> list[str]:
    """``diag compare --case A --case B``: per point and mode, each side's latency, B/A, its interval, the verdict."""
    a, b = safe(case_a), safe(case_b)
    lines = [f"compared: {b} against {a} on torch {safe(build)} (ratio: {b} / {a})"]
    if not points:
        lines.append("nothing to compare: no row of one case has a timed twin in the other (same config, same sizes)")
    shown = None
    for point in points:
        if point.point != shown:
            lines.append(f"  {safe(point.point)}")
            shown = point.point
        sides = f"{number(point.ms_a, '.3f', '')} -> {number(point.ms_b, '.3f', '')} ms/token"
        ratio = "" if point.ratio is None else f"  x{point.ratio:.3f}"
        interval = "" if point.low is None else f" (95% {point.low:.3f}-{point.high:.3f})"
        runs = f"runs {point.runs_a} / {point.runs_b}" + (f", {point.basis}" if point.basis else "")
        lines.append(f"    {point.mode:<8} {sides}{ratio}{interval}  {point.verdict}  [{runs}]")
    return lines
