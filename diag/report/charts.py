"""Trend, sweep and variant charts for the report, written as SVG (``svg.chart``)."""

from __future__ import annotations

import functools
import math
import statistics
from typing import Any, Callable, Optional, Sequence

from diag import figure
from diag import row as rows
from diag.report.inputs import Memo, digest
from diag.report.model import Matrix, RowKey
from diag.report.svg import Mark, Panel, Series, chart
from diag.store import typed
from diag.store.typed import StoredRace, StoredRun, TorchBuildRow
from diag.text import safe

MAX_LINES = 8  # per panel
DETAIL_BUILDS = 90  # builds drawn in detail; an overview shows the whole history
MAX_TICKS = 12
MAX_MARKED_POINTS = 40  # beyond this many builds, markers only clutter the line and bloat the SVG


def _latency(run: StoredRun, mode: str) -> Optional[float]:
    """A run's per-token latency, where its timing was not noisy (a noisy run draws no point)."""
    found = figure.latency(run, mode)
    return found.value if found.comparable else None


def untrusted(runs: list[StoredRun]) -> dict[str, int]:
    """Of ``runs``, how many were timed, how many drew no latency point (noisy) and how many no
    compile-time point (the compile waited for a CPU): what a page says beside its charts."""
    timed = [run for run in runs if figure.timing_judged(run)]
    return {
        "timed": len(timed),
        "noisy": sum(1 for run in timed if figure.timing_noisy(run)),
        "waited": sum(1 for run in runs if figure.compile_waited(run)),
    }


def run_values(run: StoredRun) -> tuple[Optional[float], ...]:
    """A run's value of each of ``METRICS``, in their order (None where it has none), in one pass."""
    eager, compiled = _latency(run, "eager"), _latency(run, "compiled")
    return (
        None if figure.compile_waited(run) else run.get("compile_s"),  # a compile that waited draws no point
        compiled,
        eager / compiled if eager and compiled else None,
        run.get("peak_mem_compiled_mb"),
        run.get("guard_latency_us"),
        run.get("compile_instructions"),  # counted (--count-instructions): a busy machine does not move it
    )


METRICS: list[tuple[str, str]] = [  # (title, unit), in the order of run_values
    ("Compile time", "seconds"),
    ("Compiled per-token latency", "ms / token"),
    ("Speedup (eager / compiled)", "x"),
    ("Peak memory, compiled", "MB"),
    ("Guard check per decode call", "microseconds"),
    ("Compile instructions", "instructions"),
]


# a change point's figure (diag/verdicts/changes.py): the chart that draws it, by its place in METRICS
CHARTED = {"compile_s": 0, "compiled_ms_per_token": 1, "peak_mem_compiled_mb": 3, "guard_latency_us": 4,
           "compile_instructions": 5}  # fmt: skip
# (chart, panel): each change point drawn there, as (its first build's id, the label, the tooltip)
Marked = dict[tuple[int, str], list[tuple[int, str, str]]]


def change_marks(found: Sequence[Any], case: str) -> Marked:
    """The change points of ``case``'s rows (``changes.Change``) that a chart draws, by chart and panel."""
    marked: Marked = {}
    for change in found:
        row = change.series.row
        if row.case != case or change.metric not in CHARTED:
            continue
        owner = "the runner's" if change.runner else "worse" if change.worse else "better"
        said = (
            f"{change.shift.kind} {change.size_text()} from {change.first.get('version')} ({owner}): {rows.label(row)}"
        )
        label = change.size_text().split(" ")[0]
        key = (CHARTED[change.metric], _panel_name(row.backend, row.fullgraph))
        marked.setdefault(key, []).append((change.first["id"], label, safe(said)))
    return marked


def _marks(marked: Optional[Marked], metric: int, panels: Sequence[str], builds: list[TorchBuildRow]) -> list[Mark]:
    """The marks of ``panels`` of chart ``metric`` whose build is one of ``builds``, at its x position."""
    at = {build["id"]: index for index, build in enumerate(builds)}
    return [
        Mark(float(at[build_id]), label, said)
        for panel in panels
        for build_id, label, said in (marked or {}).get((metric, panel), [])
        if build_id in at
    ]


def _line_label(row: RowKey) -> str:
    """A row's label inside its panel: the panel already names backend and fullgraph mode."""
    shown = row._asdict()
    prefix = f"{row.backend} {'fullgraph' if row.fullgraph else 'no-fullgraph'} "
    return safe(rows.describe(shown).replace(prefix, "", 1))


# per row, on each build drawn: per metric, the values of the cell's runs (None: no cell)
Values = dict[RowKey, list[Optional[Sequence[Sequence[float]]]]]


_NONE: tuple[float, ...] = ()


def median(values: Sequence[float]) -> float:
    """``statistics.median``, without its sort and checks for the one value of most cells."""
    return values[0] if len(values) == 1 else statistics.median(values)


def cell_values(cell: Optional[Any]) -> Optional[tuple[Sequence[float], ...]]:
    """Per metric of ``METRICS``, the values of a cell's runs (none for a run without one, such as a
    failed compile), in one pass."""
    if cell is None:
        return None
    if len(cell.runs) == 1:  # most cells: written out, with no loop or list to fill per metric
        a, b, c, d, e, f = run_values(cell.runs[0])
        return (
            _NONE if a is None else (a,),
            _NONE if b is None else (b,),
            _NONE if c is None else (c,),
            _NONE if d is None else (d,),
            _NONE if e is None else (e,),
            _NONE if f is None else (f,),
        )
    found: tuple[list[float], ...] = tuple([] for _ in METRICS)
    for run in cell.runs:
        for values, y in zip(found, run_values(run)):
            if y is not None:
                values.append(y)
    return found


def _build_ticks(builds: list[TorchBuildRow]) -> list[tuple[float, str]]:
    step = max(1, -(-len(builds) // MAX_TICKS))
    return [(float(i), safe(builds[i]["version"])) for i in range(0, len(builds), step)]


def _panel_name(backend: str, fullgraph: int) -> str:
    return f"{backend} {'fullgraph' if fullgraph else 'no-fullgraph'}"


def trend(values: Values, metric: int, builds: list[TorchBuildRow], marked: Optional[Marked] = None) -> Optional[str]:
    """Small multiples of ``METRICS[metric]`` over ``builds`` (``values``: each row's on each of them): a
    panel per backend x fullgraph mode, a line per row (the median of its runs on a build; a gap where
    no run has a value, such as a failed compile) with the band between its fastest and slowest run.
    The legend sits beside each panel, never on it; a change point of ``marked`` is a dashed line at its
    first build. None when no run has a value."""
    title, unit = METRICS[metric]
    grouped: dict[tuple[str, int], list[RowKey]] = {}
    for row in values:
        grouped.setdefault((row.backend, row.fullgraph), []).append(row)
    panels = []
    for (backend, fullgraph), members in sorted(grouped.items(), key=lambda p: (p[0][0], -p[0][1])):
        series = []
        for row in members[:MAX_LINES]:
            points = [cell[metric] if cell else _NONE for cell in values[row]]
            if any(points):
                several = any(len(v) > 1 for v in points)
                series.append(
                    Series(
                        _line_label(row),
                        [median(v) if v else None for v in points],
                        [min(v) if v else None for v in points] if several else None,
                        [max(v) if v else None for v in points] if several else None,
                    )
                )
        more = f" (first {MAX_LINES} of {len(members)} configs)" if len(members) > MAX_LINES else ""
        name = _panel_name(backend, fullgraph)
        panels.append(Panel(safe(name) + more, series, _marks(marked, metric, [name], builds)))
    xs = [float(i) for i in range(len(builds))]
    return chart(title, panels, xs, _build_ticks(builds), "torch build", unit, len(builds) <= MAX_MARKED_POINTS)


Points = Optional[dict[str, list[Optional[float]]]]  # a build's overview points: per panel, per metric


def build_points(matrix: Matrix, case_rows: list[RowKey], build_id: int) -> Points:
    """What the overview draws of one build: per panel (backend x fullgraph mode), per metric, the
    median of every value of its rows' runs there (None where none has one). None where no row of
    the case ran on the build: it is not drawn. A function of the build's runs alone, so a render
    keeps it from one night to the next (``inputs.Memo``)."""
    matrix.held([build_id])
    found: dict[str, list[tuple[Sequence[float], ...]]] = {}
    for row in case_rows:
        values = cell_values(matrix.column(row).get(build_id))
        if values is not None:
            found.setdefault(_panel_name(row.backend, row.fullgraph), []).append(values)
    if not found:
        return None
    points = {}
    for name, cells in found.items():
        ys = []
        for metric in range(len(METRICS)):
            ys_of_metric = [y for cell in cells for y in cell[metric]]
            ys.append(median(ys_of_metric) if ys_of_metric else None)
        points[name] = ys
    return points


def overview(points: list[dict[str, list[Optional[float]]]], panels: list[str], metric: int,
             builds: list[TorchBuildRow], marked: Optional[Marked] = None) -> Optional[str]:  # fmt: skip
    """The whole history in one panel: per backend x fullgraph mode (``panels``), the median over its
    rows on each of ``builds`` (``points``: each one's ``build_points``)."""
    title, unit = METRICS[metric]
    series = []
    for name in sorted(panels):
        ys = [(drawn.get(name) or _NO_POINTS)[metric] for drawn in points]
        series.append(Series(safe(name), ys))
    xs = [float(i) for i in range(len(builds))]
    heading = f"{title}: all {len(builds)} builds (median over configs)"
    drawn = Panel("", series, _marks(marked, metric, panels, builds))
    return chart(heading, [drawn], xs, _build_ticks(builds), "torch build", unit, markers=False)


_NO_POINTS: list[Optional[float]] = [None] * len(METRICS)


def build_cells(matrix: Matrix, case_rows: list[RowKey], build_id: int) -> dict[str, list[list[float]]]:
    """What the detailed charts draw of one build: per row of ``case_rows`` with a cell there (by its
    ``row_mark``), the values of its runs per metric (``cell_values``), as JSON-able lists. A function
    of the build's runs alone, kept from one night to the next (``inputs.Memo``): the charts' detail
    window then holds no cell of the matrix, and a night's render keeps its state closer to the newest
    build than the window reaches (resume.py)."""
    matrix.held([build_id])
    found = {}
    for row in case_rows:
        values = cell_values(matrix.column(row).get(build_id))
        if values is not None:
            found[row_mark(row)] = [list(v) for v in values]
    return found


@functools.lru_cache(maxsize=4096)
def row_mark(row: RowKey) -> str:
    """A short digest of a row: what names it in the memo, a tenth of its fields' length (made once
    per row, not once per row and build)."""
    return digest(list(row))[:16]


def case_charts(
    matrix: Matrix, case: str, memo: Optional[Memo] = None, marked: Optional[Marked] = None
) -> list[tuple[str, str]]:
    """(title, svg) for every metric with data, for the rows of ``case``: the newest DETAIL_BUILDS
    builds (with a run of the case) in detail, and when there are more, the whole history as an
    overview. What each build adds to either (``build_points``, ``build_cells``) is the ``memo``'s,
    where it keeps it."""
    case_rows = [row for row in matrix.rows if row.case == case]

    def kept(kind: str, build: TorchBuildRow, make: Callable[[Matrix, list[RowKey], int], Any]) -> Any:
        def made() -> Any:
            return make(matrix, case_rows, build["id"])

        return made() if memo is None else memo.of(f"{kind} {case}", build, made)

    per_build = [(build, kept("charts", build, build_points)) for build in matrix.builds]
    drawn_points = [(build, points) for build, points in per_build if points is not None]
    builds = [build for build, _ in drawn_points]
    first = max(0, len(builds) - DETAIL_BUILDS)
    values: Values = {row: [] for row in case_rows}
    marks = {row: row_mark(row) for row in case_rows}
    for build in builds[first:]:
        on_build = kept("cells", build, build_cells)
        for row, column in values.items():
            column.append(on_build.get(marks[row]))
    panels = sorted({_panel_name(row.backend, row.fullgraph) for row in case_rows})
    drawn = []
    for index, (title, _) in enumerate(METRICS):
        svg = trend(values, index, builds[first:], marked)
        if svg:
            drawn.append((title, svg))
            if first:
                whole = overview([points for _, points in drawn_points], panels, index, builds, marked)
                if whole:
                    drawn.append((f"{title}, whole history", whole))
    return drawn


SWEEPS = [("batch_size", "batch size"), ("prompt_length", "prompt length (tokens)")]


def _tokens_per_second(run: StoredRun, mode: str) -> Optional[float]:
    ms = _latency(run, mode)
    return (run["batch_size"] or 1) * 1000.0 / ms if ms else None


def _swept(points: dict[Any, dict[int, Any]], label: str, unit: str, title: str, lines: list[Series]):
    """A sweep chart: the swept values on a log-2 axis, a line per series. (title, SVG) or None."""
    ticks = sorted({x for each in points.values() for x in each})
    svg = chart(title, [Panel("", lines)], [math.log2(t) for t in ticks],
                [(math.log2(t), str(t)) for t in ticks], label, unit)  # fmt: skip
    return None if svg is None else (title, svg)


def sweep_charts(runs: list[StoredRun]) -> list[tuple[str, str]]:
    """Throughput and peak memory against batch size and against prompt length, where runs vary in them.

    ``runs`` are one case's runs on one build; a line per (config, eager|compiled).
    """
    drawn = []
    for field, label in SWEEPS:
        lines: dict[rows.Row, dict[int, StoredRun]] = {}
        for run in runs:
            unswept: dict[str, Any] = {field: 0}
            key = rows.of(run)._replace(**unswept)  # every field of the row but the swept one
            lines.setdefault(key, {})[typed.column(run, field)] = run  # newest run per point (runs are oldest first)
        swept = {k: v for k, v in lines.items() if len(v) > 1}
        if not swept:
            continue
        ticks = sorted({x for points in swept.values() for x in points})
        for title, unit, values in (
            (
                f"Throughput against {label}",
                "tokens / s",
                [
                    ("eager", lambda r: _tokens_per_second(r, "eager")),
                    ("compiled", lambda r: _tokens_per_second(r, "compiled")),
                ],
            ),
            (
                f"Peak memory against {label}",
                "MB",
                [
                    ("eager", lambda r: r.get("peak_mem_eager_mb")),
                    ("compiled", lambda r: r.get("peak_mem_compiled_mb")),
                ],
            ),
        ):
            series = []
            for row, points in list(swept.items())[:MAX_LINES]:
                fixed = rows.config_label(row._asdict(), sizes=tuple(n for n in rows.SIZES if n != field))
                for mode, value in values:
                    ys = [value(points[x]) if x in points else None for x in ticks]
                    if any(y is not None for y in ys):
                        series.append(Series(safe(f"{fixed}, {mode}"), ys))
            made = _swept(swept, label, unit, title, series)
            if made:
                drawn.append(made)
    return drawn


def _throughput_bounds(run: StoredRun, mode: str) -> Optional[tuple[float, float, float]]:
    """Tokens per second of a steady run, and the bounds its median's 95% interval gives them."""
    value = _tokens_per_second(run, mode)
    low_ms, high_ms = typed.column(run, f"{mode}_ms_low"), typed.column(run, f"{mode}_ms_high")
    if value is None or not low_ms or not high_ms:
        return None
    per = (run["batch_size"] or 1) * 1000.0
    return value, per / high_ms, per / low_ms


def variant_charts(runs: list[StoredRun]) -> list[tuple[str, str]]:
    """Compiled throughput (with the interval of each point as a bar) and compiled peak memory against
    each swept field, a line per variant (case) and fixed config: the runs of one build."""
    drawn = []
    for field, label in SWEEPS:
        lines: dict[tuple[str, rows.Row], dict[int, StoredRun]] = {}
        for run in runs:
            unswept: dict[str, Any] = {"case": "", "case_source": "", field: 0}
            key = rows.of(run)._replace(**unswept)
            lines.setdefault((run["case"] or "", key), {})[typed.column(run, field)] = run  # newest run per point
        swept = {k: v for k, v in lines.items() if len(v) > 1}
        if len({case for case, _ in swept}) < 2:
            continue
        ticks = sorted({x for points in swept.values() for x in points})
        for title, unit, memory in (
            (f"Compiled throughput against {label}, by variant", "tokens / s", False),
            (f"Compiled peak memory against {label}, by variant", "MB", True),
        ):
            series = []
            for (case, row), points in list(swept.items())[:MAX_LINES]:
                fixed = rows.config_label(row._asdict(), sizes=tuple(n for n in rows.SIZES if n != field))
                bounds: list[Optional[tuple[float, float, float]]] = []
                for x in ticks:
                    point = points.get(x)
                    if point is None:
                        bounds.append(None)
                    elif memory:
                        value = point.get("peak_mem_compiled_mb")
                        bounds.append(None if value is None else (value, value, value))
                    else:
                        bounds.append(_throughput_bounds(point, "compiled"))
                if any(bounds):
                    series.append(
                        Series(
                            safe(f"{case}: {fixed}"),
                            [b and b[0] for b in bounds],
                            [b and b[1] for b in bounds],
                            [b and b[2] for b in bounds],
                            bars=not memory,
                        )
                    )
            made = _swept(swept, label, unit, title, series)
            if made:
                drawn.append(made)
    return drawn


RACE_TITLE = "Raced variants by build: the variant's decode step over the first case's, per round (median, 95%)"


def race_trend(races: list[StoredRace], builds: list[TorchBuildRow]) -> Optional[tuple[str, str]]:
    """Each raced pair's ratio (with its interval as a bar) on every build it was raced on, oldest
    first: a panel per config, a line per variant against its baseline, the newest race of a build
    drawn (a gap where the variant was not raced or the race was noisy; no line where it never was).
    None under two builds."""
    position = {build["id"]: index for index, build in enumerate(builds)}
    lines: dict[str, dict[str, dict[int, StoredRace]]] = {}
    for race in sorted(races, key=lambda r: r["id"]):
        if race["torch_build_id"] in position:
            name = f"{race['case']} / {race['baseline']}"
            lines.setdefault(rows.config_label(race), {}).setdefault(name, {})[race["torch_build_id"]] = race
    drawn = sorted({position[b] for panel in lines.values() for points in panel.values() for b in points})
    if len(drawn) < 2:
        return None
    shown = [builds[i] for i in drawn]
    panels = []
    for config, panel in sorted(lines.items()):
        series = []
        for label, points in sorted(panel.items())[:MAX_LINES]:
            picked = [points.get(build["id"]) for build in shown]
            kept = [r if r and r["ratio"] is not None and r["verdict"] != "noisy" else None for r in picked]
            if not any(kept):  # never raced on these builds: its error is in the table, not a line
                continue
            series.append(
                Series(
                    safe(label),
                    [r["ratio"] if r else None for r in kept],
                    [r["low"] if r else None for r in kept],
                    [r["high"] if r else None for r in kept],
                    bars=True,
                )
            )
        panels.append(Panel(safe(config), series))
    xs = [float(i) for i in range(len(shown))]
    made = chart(RACE_TITLE, panels, xs, _build_ticks(shown), "torch build", "variant / first", len(shown) <= 40)
    return (RACE_TITLE, made) if made else None
