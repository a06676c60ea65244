"""Change points over the stored history: per variant, row and metric, the builds' figures in build
order, and where they stepped or crept (``_method().py``), each dated to the first build that
moved, with its size, interval and commit range. Pure: the caller reads the runs and builds.

A point is the median of a build's runs of the row that give the figure: a latency figure marked
noisy, or a compile that waited for a CPU, is no point (``figure.py`` says which); a count is taken
from runs that compiled and ran (a failure's counts are partial). With a stable twin (a pinned
release the same runner ran each night), the twin's own points, one a night, are searched the same
way: a change the twin made the same night in the same direction, at least half as large, is the
runner's, not torch's.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence

from diag import figure
from diag import row as rows
from diag.build import order as build_order
from diag.contract import WORKS
from diag.store.typed import StoredRun, TorchBuildRow

if TYPE_CHECKING:
    from diag.verdicts.changepoints import Scale, Shift

# metric: (scale, what it is, its unit)
METRICS: dict[str, tuple[Scale, str, str]] = {
    "compile_s": ("ratio", "compile time, cold", "s"),
    "compile_warm_s": ("ratio", "compile time, warm", "s"),
    "compile_instructions": ("ratio", "compile instructions", ""),
    "guard_latency_us": ("ratio", "guard time", "us"),
    "eager_ms_per_token": ("ratio", "eager ms/token", "ms"),
    "compiled_ms_per_token": ("ratio", "compiled ms/token", "ms"),
    "peak_mem_eager_mb": ("ratio", "peak memory, eager", "MB"),
    "peak_mem_compiled_mb": ("ratio", "peak memory, compiled", "MB"),
    "graph_count": ("count", "graphs", ""),
    "graph_break_count": ("count", "graph breaks", ""),
    "recompile_count": ("count", "recompiles", ""),
}
Twins = dict[tuple, tuple[list[str], list[float]]]  # (row, metric): (nights, their points)
# a count's metric: its name as a contract and ``diag bisect --on count:NAME`` call it (diag/signal.py)
COUNTED = {"graph_count": "graphs", "graph_break_count": "graph_breaks", "recompile_count": "recompiles"}
LATENCY = ("eager_ms_per_token", "compiled_ms_per_token")  # no point where the run's timing was noisy
COMPILE = ("compile_s", "compile_warm_s")  # no point where the compile waited for a CPU
RUNNER_SHARE = 0.5  # of a change's log size, what the twin's change the same night must reach


def _method() -> ModuleType:
    """The search (changepoints.py), imported on first use: numpy is for the commands that search."""
    from diag.verdicts import changepoints

    return changepoints


def values(run: Mapping[str, Any], metrics: Sequence[str]) -> list[Optional[float]]:
    """The run's figure of each of ``metrics`` where it can be a point; None where not (module
    docstring). One pass over the run: a history holds tens of thousands."""
    noisy, waited, works = figure.timing_noisy(run), figure.compile_waited(run), run.get("status") in WORKS
    found: list[Optional[float]] = []
    for metric in metrics:
        number = run.get(metric)
        if not isinstance(number, (int, float)) or isinstance(number, bool):
            found.append(None)
        elif metric in LATENCY:
            found.append(None if noisy else float(number))
        elif metric in COMPILE:
            found.append(None if waited or number <= 0 else float(number))
        elif METRICS[metric][0] == "count":
            found.append(float(number) if works else None)
        else:
            found.append(float(number) if number > 0 else None)
    return found


def night(run: Mapping[str, Any]) -> str:
    return str(run.get("started_at") or "")[:10]


@dataclass
class Series:
    variant: Optional[str]
    row: rows.Row
    metric: str
    builds: list[TorchBuildRow] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    nights: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Change:
    """A change point of one series: ``first`` is the first build that moved, ``before`` the build
    before it (the commit range is between them), ``settled`` the first at the new level."""

    series: Series
    shift: Shift
    runner: Optional[str]  # why it is the runner's change, not torch's; None where it is torch's
    twin: Optional[str]  # what the stable twin said of it: moved the same night, did not, or cannot tell

    @property
    def metric(self) -> str:
        return self.series.metric

    @property
    def scale(self) -> Scale:
        return METRICS[self.metric][0]

    @property
    def first(self) -> TorchBuildRow:
        return self.series.builds[self.shift.start]

    @property
    def before(self) -> TorchBuildRow:
        return self.series.builds[self.shift.start - 1]

    @property
    def settled(self) -> TorchBuildRow:
        return self.series.builds[self.shift.end]

    @property
    def worse(self) -> bool:
        return _method().worse(self.shift, self.scale)

    def size_text(self) -> str:
        s = self.shift
        if self.scale == "ratio":
            return f"x{s.size:.3f} (95% {s.low:.3f}-{s.high:.3f})"
        return f"{s.size:+g} (95% {s.low:+g} to {s.high:+g})"

    def as_dict(self) -> dict[str, Any]:
        s = self.shift
        return {
            "variant": self.series.variant,
            "row": rows.label(self.series.row),
            "fields": self.series.row._asdict(),
            "metric": self.metric,
            "kind": s.kind,
            "ongoing": s.ongoing,
            "what": METRICS[self.metric][1],
            "size_text": self.size_text(),
            "scale": self.scale,
            "size": s.size,
            "low": s.low,
            "high": s.high,
            "p_value": s.p_value,
            "points_before": s.before,
            "points_after": s.after,
            "first_build": self.first.get("version"),
            "before_build": self.before.get("version"),
            "settled_build": self.settled.get("version"),
            "commits": [self.before.get("git_version"), self.first.get("git_version")],
            "worse": self.worse,
            "bisect_on": COUNTED.get(self.metric) and f"count:{COUNTED[self.metric]}",
            "runner": self.runner,
            "twin": self.twin,
        }


def series_of(
    runs: Iterable[StoredRun], builds: Mapping[int, TorchBuildRow], metrics: Sequence[str], skip: Optional[int] = None
) -> list[Series]:
    """Per variant, row and metric, one point a build in build order: the median of its runs' figures.
    ``skip``: a build left out (the stable twin, searched by night instead)."""
    found: dict[tuple, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    first_night: dict[tuple, dict[int, str]] = defaultdict(dict)
    for run in runs:
        build_id = run.get("torch_build_id")
        if build_id is None or build_id == skip or build_id not in builds:
            continue
        row, variant, when = rows.of(run), builds[build_id].get("variant"), night(run)
        for metric, figure_value in zip(metrics, values(run, metrics)):
            if figure_value is not None:
                found[(variant, row, metric)][build_id].append(figure_value)
                first_night[(variant, row, metric)].setdefault(build_id, when)
    rank = {b["id"]: i for i, b in enumerate(sorted(builds.values(), key=build_order))}  # each build's place, once
    made = []
    for (variant, row, metric), by_build in found.items():
        ordered = sorted(by_build, key=rank.__getitem__)
        made.append(
            Series(
                variant,
                row,
                metric,
                [builds[b] for b in ordered],
                [statistics.median(by_build[b]) for b in ordered],
                [first_night[(variant, row, metric)][b] for b in ordered],
            )
        )
    return sorted(made, key=lambda s: (s.variant or "", rows.sort_key(s.row), list(METRICS).index(s.metric)))


def twin_nights(runs: Iterable[StoredRun], twin: int, metrics: Sequence[str]) -> Twins:
    """The stable twin's points per row and metric: one a night (the median of that night's runs)."""
    found: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if run.get("torch_build_id") != twin or not night(run):
            continue
        for metric, figure_value in zip(metrics, values(run, metrics)):
            if figure_value is not None:
                found[(rows.of(run), metric)][night(run)].append(figure_value)
    return {
        key: (sorted(by_night), [statistics.median(by_night[n]) for n in sorted(by_night)])
        for key, by_night in found.items()
    }


def _against_twin(
    series: Series, shift: Shift, twin: Optional[tuple[list[str], list[float]]], twin_version: Optional[str]
) -> tuple[Optional[str], Optional[str]]:
    """(why it is the runner's change, or None; what the twin said) for one change: the twin's own
    nights before the change's first build and from the night it settled, up to ``WINDOW`` a side,
    are set against each other as the change's own builds were."""
    if twin_version is None:
        return None, None
    nights, values = twin or ([], [])
    started, settled = series.nights[shift.start], series.nights[shift.end]
    before = [v for n, v in zip(nights, values) if n < started][-_method().WINDOW :]
    after = [v for n, v in zip(nights, values) if n >= settled][: _method().WINDOW]
    if min(len(before), len(after)) < _method().MIN_SIZE:
        return None, f"runner not ruled out: stable {twin_version} has too few nights of this row around it"
    scale = METRICS[series.metric][0]
    theirs = _method().between(before, after, scale)
    own, moved = _method().moved(shift, scale), _method().moved(theirs, scale)
    said = f"stable {twin_version} moved {_size(theirs, scale)} over the same nights"
    if own * moved > 0 and abs(moved) >= RUNNER_SHARE * abs(own):
        return f"the runner's: {said}", said
    return None, said


def _size(shift: Shift, scale: Scale) -> str:
    return f"x{shift.size:.3f}" if scale == "ratio" else f"{shift.size:+g}"


def changes(
    all_series: Iterable[Series], twins: Optional[Twins] = None, twin_version: Optional[str] = None
) -> list[Change]:
    """Every change point of every series, newest first (by the first build that moved)."""
    found = []
    for series in all_series:
        scale = METRICS[series.metric][0]
        for shift in _method().shifts(series.values, scale):
            twin = (twins or {}).get((series.row, series.metric))
            runner, said = _against_twin(series, shift, twin, twin_version)
            found.append(Change(series, shift, runner, said))
    return sorted(found, key=lambda c: build_order(c.first), reverse=True)


def beyond(change: Change, limit: Callable[[str], float]) -> bool:
    """A change that made its metric worse past ``limit(metric)`` (a ratio; a count by any unit) and
    is not the runner's."""
    if change.runner is not None or not change.worse:
        return False
    return _method().beyond(change.shift, change.scale, limit(change.metric) if change.scale == "ratio" else 0.5)


def without(all_series: Iterable[Series], build_ids: set) -> list[Series]:
    """The series with the points of ``build_ids`` left out: the history as it was the night before."""
    kept = []
    for series in all_series:
        keep = [i for i, build in enumerate(series.builds) if build.get("id") not in build_ids]
        kept.append(
            Series(
                series.variant,
                series.row,
                series.metric,
                [series.builds[i] for i in keep],
                [series.values[i] for i in keep],
                [series.nights[i] for i in keep],
            )
        )
    return kept


def tonight(now: list[Change], before: list[Change], limit: Callable[[str], float]) -> list[Change]:
    """The changes of ``now`` past ``limit`` that the history without the newest build did not
    have past it, near the same build: the night a creep becomes significant, dated to where it started."""
    held = defaultdict(list)
    for change in before:
        if beyond(change, limit):
            held[(change.series.variant, change.series.row, change.metric)].append(build_order(change.first))
    new = []
    for change in now:
        if not beyond(change, limit):
            continue
        key = (change.series.variant, change.series.row, change.metric)
        starts = [p for p, b in enumerate(change.series.builds) if build_order(b) in held[key]]
        if any(abs(start - change.shift.start) <= _method().GAP for start in starts):
            continue
        new.append(change)
    return new
