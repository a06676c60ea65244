"""Why one variant is slower than another: the race's profiled rounds (probe/attribution.py) grouped
by what the time went to, and set against the baseline's. Pure.

Per round, each variant's decode steps give a time for each op; ops are put in groups
(``GROUPS`` of diag/run/profile.py, first match wins), and a group's time per token in the round is
its median over the decode steps (a step the host stopped for a while does not move it). Per group,
the variant's time per token less the baseline's in the same round is one paired difference; the
row's figure is the median of those differences over the rounds, with the median's exact 95%
interval (stats.median_interval). Rows are ranked by the size of their difference. A row *explains*
where its interval leaves out zero; the explained share is the sum of those rows over the race's
measured difference (the timed rounds', without the profiler), and the rest is printed as
unexplained: the profiler's own cost per op, and rows too noisy to say.
"""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Optional

from diag.run.profile import ProfileSummary, grouped, kernels, per_token, steps
from diag.stats import median_interval
from diag.store.typed import StoredRun

TOP_OPS = 8


@dataclass
class Row:
    name: str  # a group, or an op
    ms_case: float  # median over the profiled rounds, ms per decode token
    ms_baseline: float
    diff_ms: float  # median over rounds of the paired difference, case - baseline
    low: Optional[float]
    high: Optional[float]
    share: Optional[float]  # of the measured difference (Breakdown.measured_ms); without one, of every row's
    explains: bool  # the interval leaves out zero

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Breakdown:
    baseline: str
    case: str
    rounds: int
    device: bool
    groups: list[Row] = field(default_factory=list)
    ops: list[Row] = field(default_factory=list)  # the ops with the largest differences
    measured_ms: Optional[float] = None  # the race's difference per token, without the profiler
    measured_how: Optional[str] = None  # what measured_ms is made of, in figures, as the text says it
    explained_ms: float = 0.0
    kernels: dict[str, dict[str, float]] = field(default_factory=dict)  # case -> SDPA kernel -> calls a token
    # case -> fused kernel torch refused -> its reason -> SDPA calls of one eager generation (CUDA only)
    refused: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    note: Optional[str] = None
    paired: bool = True  # rounds of one race (paired), or generations of two runs (not)

    @property
    def explained_share(self) -> Optional[float]:
        return self.explained_ms / self.measured_ms if self.measured_ms else None

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found["explained_share"] = self.explained_share
        return found


RESAMPLES = 2000


def _unpaired_interval(case: list[float], baseline: list[float]) -> tuple[float, float]:
    """The 95% percentile-bootstrap interval of the difference of two medians (a fixed seed: the same
    runs give the same interval), for generations of two runs, which no round pairs."""
    rng = random.Random(0)
    diffs = sorted(
        statistics.median(rng.choices(case, k=len(case))) - statistics.median(rng.choices(baseline, k=len(baseline)))
        for _ in range(RESAMPLES)
    )
    return diffs[int(0.025 * RESAMPLES)], diffs[int(0.975 * RESAMPLES) - 1]


def _rows(
    case: list[dict[str, float]],
    baseline: list[dict[str, float]],
    paired: bool = True,
    limit: Optional[int] = None,
    measured: Optional[float] = None,
) -> list[Row]:
    """A row per name, ranked by the size of its difference; ``limit``: the first rows only (only their
    intervals are computed, a bootstrap each where unpaired). A row's share is of ``measured`` (the
    difference the race or the runs measured, the one denominator the text and the explained share
    use); without it, of the sum of every row's difference."""
    sides: dict[str, tuple[list[float], list[float], Optional[list[float]], float]] = {}
    for name in sorted({name for side in (case, baseline) for times in side for name in times}):
        a, b = [c.get(name, 0.0) for c in case], [x.get(name, 0.0) for x in baseline]
        pairs = [x - y for x, y in zip(a, b)] if paired else None
        diff = statistics.median(pairs) if pairs is not None else statistics.median(a) - statistics.median(b)
        sides[name] = (a, b, pairs, diff)
    total = measured if measured else sum(abs(diff) for *_, diff in sides.values())
    found = []
    for name in sorted(sides, key=lambda name: abs(sides[name][3]), reverse=True)[:limit]:
        a, b, pairs, diff = sides[name]
        interval = median_interval(pairs) if pairs is not None else _unpaired_interval(a, b)
        low, high = interval if interval is not None else (None, None)
        explains = low is not None and high is not None and (low > 0 or high < 0)
        share = diff / total if total else None
        found.append(Row(name, statistics.median(a), statistics.median(b), diff, low, high, share, explains))
    return found


def explain(
    profiled: Mapping[str, Any],
    baseline: str,
    case: str,
    measured_ms: Optional[float],
    device: bool = False,
    measured_how: Optional[str] = None,
) -> Breakdown:
    """``case`` against ``baseline`` from a race record's ``profiled`` rounds; ``measured_ms``: the
    race's own difference per token (timed rounds, case - baseline), ``measured_how`` its figures."""
    rounds = profiled.get("rounds") or {}
    a, b = rounds.get(baseline) or [], rounds.get(case) or []
    paired = min(len(a), len(b))
    found = Breakdown(baseline, case, paired, device, measured_ms=measured_ms, measured_how=measured_how)
    found.kernels = {name: kernels(side) for name, side in ((baseline, a), (case, b))}
    found.refused = {name: (profiled.get("refused") or {}).get(name) or {} for name in (baseline, case)}
    if paired == 0:
        found.note = profiled.get("error") or "no profiled round of both"
        return found
    steps_a, steps_b = [steps(r, device) for r in a[:paired]], [steps(r, device) for r in b[:paired]]
    found.groups = _rows(
        [per_token([grouped(s) for s in one]) for one in steps_b],
        [per_token([grouped(s) for s in one]) for one in steps_a],
        measured=measured_ms,
    )
    found.ops = _rows(
        [per_token(one) for one in steps_b], [per_token(one) for one in steps_a], limit=TOP_OPS, measured=measured_ms
    )
    found.explained_ms = sum(row.diff_ms for row in found.groups if row.explains)
    if profiled.get("error"):
        found.note = f"the profiler failed after {paired} rounds: {profiled['error']}"
    return found


def profile_of(run: StoredRun) -> ProfileSummary:
    """What diag run --profile kept of a run (``summary``, in its ``extra``), each field in the shape
    its readers take: a field of another shape (a DB written by another diag, or edited) is left out,
    never passed on to fail a page or a line; empty where the run was not profiled."""
    extra = run.get("extra")
    stored = extra.get("profile") if isinstance(extra, dict) else None
    if not isinstance(stored, dict):
        return ProfileSummary()
    number = (int, float)
    ops_ms = [
        {str(op): float(ms) for op, ms in generation.items() if isinstance(ms, number) and not isinstance(ms, bool)}
        for generation in _listed(stored.get("ops_ms"))
        if isinstance(generation, dict)
    ]
    refused = {
        str(kernel): {str(said): int(calls) for said, calls in reasons.items() if isinstance(calls, int)}
        for kernel, reasons in _mapping(stored.get("refused")).items()
        if isinstance(reasons, dict)
    }
    return ProfileSummary(
        trace=stored["trace"] if isinstance(stored.get("trace"), str) else None,
        top=[op for op in _listed(stored.get("top")) if isinstance(op, dict) and isinstance(op.get("op"), str)],
        seconds=stored["seconds"] if isinstance(stored.get("seconds"), number) else None,
        ops_ms=ops_ms,
        kernels={str(k): float(n) for k, n in _mapping(stored.get("kernels")).items() if isinstance(n, number)},
        refused=refused,
        device_time=stored.get("device_time") is True,
    )


def stored_breakdown(text: Optional[str]) -> Optional[Breakdown]:
    """A race's stored breakdown (``Breakdown.as_dict``, as JSON) read back; None where there is none,
    or it is not of that shape (a DB written by another diag, or edited): pages and lines then say
    the race was not broken down, never fail on it."""
    try:
        stored = json.loads(text) if text else None
        if not isinstance(stored, dict):
            return None
        measured = stored.get("measured_ms")
        found = Breakdown(
            str(stored["baseline"]),
            str(stored["case"]),
            int(stored["rounds"]),
            bool(stored["device"]),
            groups=[Row(**row) for row in _listed(stored.get("groups"))],
            ops=[Row(**row) for row in _listed(stored.get("ops"))],
            measured_ms=None if measured is None else float(measured),
            measured_how=None if stored.get("measured_how") is None else str(stored["measured_how"]),
            explained_ms=float(stored.get("explained_ms") or 0.0),
            note=None if stored.get("note") is None else str(stored["note"]),
            paired=bool(stored.get("paired", True)),
        )
        found.kernels = {
            str(c): {str(k): float(n) for k, n in ran.items()} for c, ran in _mapping(stored.get("kernels")).items()
        }
        found.refused = {
            str(c): {str(k): {str(why): int(n) for why, n in said.items()} for k, said in by_kernel.items()}
            for c, by_kernel in _mapping(stored.get("refused")).items()
        }
        for row in found.groups + found.ops:
            row.name, row.explains = str(row.name), bool(row.explains)
            row.ms_case, row.ms_baseline, row.diff_ms = float(row.ms_case), float(row.ms_baseline), float(row.diff_ms)
            row.low, row.high, row.share = (None if v is None else float(v) for v in (row.low, row.high, row.share))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return found


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _mapping(value: Any) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def of_runs(before: StoredRun, after: StoredRun, before_name: str, after_name: str) -> Optional[Breakdown]:
    """Two runs' profiles (``summary``, in their ``extra``) set against each other, by op group; None
    where either run was not profiled. Their generations ran in two processes, so none pairs with
    another: each row is the difference of the two medians with a bootstrap interval."""
    a, b = (profile_of(run) for run in (before, after))
    if not a.get("ops_ms") or not b.get("ops_ms"):
        return None
    found = Breakdown(
        before_name, after_name, min(len(a["ops_ms"]), len(b["ops_ms"])), bool(b.get("device_time")), paired=False
    )
    before_ms, after_ms = before.get("compiled_ms_per_token"), after.get("compiled_ms_per_token")
    found.measured_ms = after_ms - before_ms if before_ms is not None and after_ms is not None else None
    if found.measured_ms is not None:
        found.measured_how = f"the two runs' medians, {after_ms:.3f} - {before_ms:.3f}"
    measured = found.measured_ms
    found.groups = _rows(
        [grouped(o) for o in b["ops_ms"]], [grouped(o) for o in a["ops_ms"]], paired=False, measured=measured
    )
    found.ops = _rows(b["ops_ms"], a["ops_ms"], paired=False, limit=TOP_OPS, measured=measured)
    found.kernels = {before_name: a.get("kernels") or {}, after_name: b.get("kernels") or {}}
    found.refused = {before_name: a.get("refused") or {}, after_name: b.get("refused") or {}}
    found.explained_ms = sum(row.diff_ms for row in found.groups if row.explains)
    return found


def of_comparison(comparison: Any) -> Optional[Breakdown]:
    """``of_runs`` for one row of ``diag compare`` (a regress.RowComparison), its runs named by id."""
    before, after = comparison.before, comparison.after
    if not (before and after):
        return None
    return of_runs(before, after, f"run #{before['id']}", f"run #{after['id']}")


def groups_of_run(run: StoredRun) -> list[tuple[str, float]]:
    """A profiled run's compiled decode step by group: the median over its profiled generations of
    each group's ms per token, largest first; empty where the run was not profiled."""
    generations = profile_of(run).get("ops_ms") or []
    by_group = [grouped(ops) for ops in generations]
    names = {name for g in by_group for name in g}
    found = [(name, statistics.median(g.get(name, 0.0) for g in by_group)) for name in names]
    return sorted(found, key=lambda item: item[1], reverse=True)


def kernel_text(said: dict[str, float]) -> str:
    """SDPA kernels as a line says them: ``CPU flash x2 a token``, or that there was no SDPA call."""
    calls = ", ".join(f"{kernel} x{count:g} a token" for kernel, count in sorted(said.items()))
    return calls or "no SDPA call (attention in the compiled graph's own kernels, or computed by the case)"


def refusal_lines(refused: dict[str, dict[str, int]]) -> list[str]:
    """The fused kernels torch refused, each reason with its calls: ``flash refused (24 calls):
    Flash Attention does not support non-null attn_mask.``"""
    return [
        f"{kernel} refused ({calls} call{'s' if calls != 1 else ''}): {said}"
        for kernel, reasons in sorted(refused.items())
        for said, calls in sorted(reasons.items(), key=lambda item: -item[1])
    ]


def kernel_change(before: StoredRun, after: StoredRun) -> Optional[tuple[str, str]]:
    """The SDPA kernels of two profiled runs where they differ, as text; None where they agree or a
    run was not profiled."""
    a, b = (profile_of(run) for run in (before, after))
    if "kernels" not in a or "kernels" not in b or not a.get("ops_ms") or not b.get("ops_ms"):
        return None
    if sorted(a["kernels"]) == sorted(b["kernels"]):
        return None
    return kernel_text(a["kernels"]), kernel_text(b["kernels"])


def lines(found: Breakdown) -> list[str]:
    """What ``diag race --profile`` prints under a verdict."""
    unit = "device" if found.device else "CPU"
    out = [
        f"    where the time goes ({found.case} - {found.baseline}, ms per token, {unit} time, "
        f"{found.rounds} profiled {'rounds' if found.paired else 'generations a side'}):"
    ]
    if not found.groups:  # the profiler failed, or no decode step ran (--new-tokens 1)
        return [*out, f"      {found.note or 'no decode step was profiled'}"]
    width = max(len(row.name) for row in found.groups)
    for row in found.groups:
        interval = f"{row.low:+.3f} to {row.high:+.3f}" if row.low is not None and row.high is not None else "-"
        share = f"{row.share:>5.0%}" if row.share is not None else "    -"
        mark = "" if row.explains else "  (interval holds 0)"
        out.append(
            f"      {row.name:<{width}}  {row.diff_ms:+8.3f} (95% {interval})  {share}   "
            f"{row.ms_case:.3f} vs {row.ms_baseline:.3f}{mark}"
        )
    top = [row for row in found.ops if row.explains][:3]
    if top:
        out.append("      largest op differences: " + "; ".join(f"{row.name} {row.diff_ms:+.3f}" for row in top))
    if found.measured_ms is not None:
        rest = found.measured_ms - found.explained_ms
        explained = found.explained_share
        part = f"{explained:.0%}" if explained is not None else "-"
        rest_said = (
            f"unexplained {rest:+.3f} (rows too noisy to say, and what the profiler cannot see)"
            if rest >= 0
            else f"the rows exceed it by {-rest:.3f} (the profiler's own cost per op and per compiled region, "
            "more for the case that runs more of them)"
        )
        how = f" ({found.measured_how})" if found.measured_how else ""
        out.append(
            f"      {'the race' if found.paired else 'the runs'} measured {found.measured_ms:+.3f} ms per token{how}, "
            f"of which each row's share above is; the rows whose interval leaves out 0 explain "
            f"{found.explained_ms:+.3f} ({part}); {rest_said}"
        )
    for name, ran in found.kernels.items():
        out.append(f"      attention kernels of {name}: {kernel_text(ran)}")
        out += [f"        {line}" for line in refusal_lines(found.refused.get(name) or {})]
    if len({tuple(sorted(k)) for k in found.kernels.values()}) > 1:
        out.append("      the two ran different attention kernels")
    if found.note and found.groups:
        out.append(f"      {found.note}")
    return out
