"""Trend charts across torch builds, drawn with matplotlib and inlined as SVG."""

from __future__ import annotations

import io
import math
import multiprocessing
import os
import statistics
from typing import Any, Callable, Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after matplotlib.use selects the file backend)

from diag import row as rows  # noqa: E402 (after matplotlib.use selects the file backend)
from diag.report.model import Matrix, RowKey  # noqa: E402 (after matplotlib.use selects the file backend)
from diag.text import safe  # noqa: E402 (after matplotlib.use selects the file backend)

# Labels are stored values (case names, configs): never read "$...$" in them as mathtext.
# A fixed salt and no date: the same data draws byte-identical SVG (re-rendering changes no file).
plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "text.parse_math": False, "svg.hashsalt": "diag"})

MAX_LINES = 8  # per panel
DETAIL_BUILDS = 90  # builds drawn in detail; an overview shows the whole history
MAX_TICKS = 12
MAX_MARKED_POINTS = 40  # beyond this many builds, markers only clutter the line and bloat the SVG


def _speedup(run: dict[str, Any]) -> Optional[float]:
    eager, compiled = _latency(run, "eager"), _latency(run, "compiled")
    return eager / compiled if eager and compiled else None


def _latency(run: dict[str, Any], mode: str) -> Optional[float]:
    """A run's per-token latency, where its timing was not noisy (a noisy run draws no point)."""
    return None if run.get("timing_noisy") else run.get(f"{mode}_ms_per_token")


Metric = tuple[str, str, Callable[[dict[str, Any]], Optional[float]]]
METRICS: list[Metric] = [
    ("Compile time", "seconds", lambda r: r.get("compile_s")),
    ("Compiled per-token latency", "ms / token", lambda r: _latency(r, "compiled")),
    ("Speedup (eager / compiled)", "x", _speedup),
    ("Peak memory, compiled", "MB", lambda r: r.get("peak_mem_compiled_mb")),
    ("Guard check per decode call", "microseconds", lambda r: r.get("guard_latency_us")),
]


def _svg(figure) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _line_label(row: RowKey) -> str:
    """A row's label inside its panel: the panel already names backend and fullgraph mode."""
    shown = row._asdict()
    prefix = f"{row.backend} {'fullgraph' if row.fullgraph else 'no-fullgraph'} "
    return safe(rows.describe(shown).replace(prefix, "", 1))


def _cell_values(matrix: Matrix, row: RowKey, build: dict[str, Any], value) -> list[float]:
    cell = matrix.cell(row, build["id"])
    return [] if cell is None else [y for run in cell.runs if (y := value(run)) is not None]


def _ticks(axes, labels: list[str]) -> None:
    step = max(1, -(-len(labels) // MAX_TICKS))
    axes.set_xticks(range(0, len(labels), step))
    axes.set_xticklabels([safe(label) for label in labels[::step]], rotation=30, ha="right")


def trend(matrix: Matrix, row_keys: list[RowKey], metric: Metric, builds: list[dict[str, Any]]) -> Optional[str]:
    """Small multiples of ``metric`` over ``builds``: a panel per backend x fullgraph mode, a line per
    row (the median of its runs on a build; a gap where no run has a value, such as a failed compile)
    with the band between its fastest and slowest run. The legend sits beside each panel, never on it.
    None when no run has a value."""
    title, unit, value = metric
    panels: dict[tuple[str, int], list[RowKey]] = {}
    for row in row_keys:
        panels.setdefault((row.backend, row.fullgraph), []).append(row)
    drawn_panels = []
    for (backend, fullgraph), members in sorted(panels.items(), key=lambda p: (p[0][0], -p[0][1])):
        lines = []
        for row in members[:MAX_LINES]:
            values = [_cell_values(matrix, row, build, value) for build in builds]
            if any(values):
                lines.append((row, values))
        if lines:
            drawn_panels.append((f"{backend} {'fullgraph' if fullgraph else 'no-fullgraph'}", lines, len(members)))
    if not drawn_panels:
        return None
    height = 1.5 + 1.9 * len(drawn_panels)
    figure, axes_list = plt.subplots(len(drawn_panels), 1, figsize=(10, height), sharex=True, squeeze=False)
    figure.subplots_adjust(left=0.1, right=0.66, bottom=1.1 / height, top=1 - 0.55 / height, hspace=0.4)
    xs = list(range(len(builds)))
    marker = "o" if len(builds) <= MAX_MARKED_POINTS else None
    for axes, (panel, lines, total) in zip((a[0] for a in axes_list), drawn_panels):
        for row, values in lines:
            middle = [statistics.median(v) if v else math.nan for v in values]
            (line,) = axes.plot(xs, middle, marker=marker, markersize=3, linewidth=1.2, label=_line_label(row))
            if any(len(v) > 1 for v in values):
                axes.fill_between(
                    xs,
                    [min(v) if v else math.nan for v in values],
                    [max(v) if v else math.nan for v in values],
                    color=line.get_color(),
                    alpha=0.18,
                    linewidth=0,
                )
        more = f" (first {MAX_LINES} of {total} configs)" if total > MAX_LINES else ""
        # a text, not set_title: matplotlib re-measures a title against the ticks on every draw
        axes.text(0, 1.03, safe(panel) + more, transform=axes.transAxes, fontsize=9)
        axes.set_ylabel(unit)
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    axes_list[-1][0].set_xlabel("torch build")
    _ticks(axes_list[-1][0], [b["version"] for b in builds])
    figure.suptitle(title, x=0.1, y=1 - 0.12 / height, ha="left", va="top", fontsize=10, fontweight="bold")
    return _svg(figure)


def overview(matrix: Matrix, row_keys: list[RowKey], metric: Metric) -> Optional[str]:
    """The whole history in one panel: per backend x fullgraph mode, the median over its rows per build."""
    title, unit, value = metric
    panels: dict[str, list[RowKey]] = {}
    for row in row_keys:
        panels.setdefault(f"{row.backend} {'fullgraph' if row.fullgraph else 'no-fullgraph'}", []).append(row)
    figure, axes = plt.subplots(figsize=(10, 2.8))
    figure.subplots_adjust(left=0.1, right=0.66, bottom=0.3, top=0.88)
    drawn = 0
    for name, members in sorted(panels.items()):
        ys = []
        for build in matrix.builds:
            values = [y for row in members for y in _cell_values(matrix, row, build, value)]
            ys.append(statistics.median(values) if values else math.nan)
        if any(not math.isnan(y) for y in ys):
            axes.plot(range(len(ys)), ys, linewidth=0.9, label=safe(name))
            drawn += 1
    if not drawn:
        plt.close(figure)
        return None
    _ticks(axes, [b["version"] for b in matrix.builds])
    axes.set_ylabel(unit)
    axes.text(
        0, 1.03, f"{title}: all {len(matrix.builds)} builds (median over configs)", transform=axes.transAxes, fontsize=9
    )
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _svg(figure)


def _finish(axes) -> None:
    """Grid, and the legend beside the plot, where long config labels never cover data."""
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def case_charts(matrix: Matrix, case: str) -> list[tuple[str, str]]:
    """(title, svg) for every metric with data, for the rows of ``case``: the newest DETAIL_BUILDS
    builds in detail, and when there are more, the whole history as an overview."""
    case_rows = [row for row in matrix.rows if row.case == case]
    builds = [b for b in matrix.builds if any(matrix.cell(row, b["id"]) for row in case_rows)]
    charts = []
    for metric in METRICS:
        svg = trend(matrix, case_rows, metric, builds[-DETAIL_BUILDS:])
        if svg:
            charts.append((metric[0], svg))
            if len(builds) > DETAIL_BUILDS:
                whole = overview(matrix, case_rows, metric)
                if whole:
                    charts.append((f"{metric[0]}, whole history", whole))
    return charts


_SHARED: Optional[Matrix] = None  # the matrix forked workers draw from (inherited, never pickled)


def _draw_case(case: str) -> list[tuple[str, str]]:
    assert _SHARED is not None
    return case_charts(_SHARED, case)


class Drawing:
    """``case_charts`` for every case, drawn in forked worker processes while the caller renders the
    rest of the site (matplotlib is single-threaded; a year of nightlies is seconds of drawing a case).
    Where the platform does not fork, drawn in this process when asked for."""

    def __init__(self, matrix: Matrix, cases: list[str], workers: Optional[int] = None) -> None:
        global _SHARED
        self.matrix, self.cases, self.pool, self.pending = matrix, cases, None, None
        workers = min(len(cases), workers or os.cpu_count() or 1)
        if workers >= 2 and "fork" in multiprocessing.get_all_start_methods():
            _SHARED = matrix  # inherited by the forked workers, never pickled
            self.pool = multiprocessing.get_context("fork").Pool(workers)
            _SHARED = None
            self.pending = self.pool.map_async(_draw_case, cases, chunksize=1)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()

    def result(self) -> dict[str, list[tuple[str, str]]]:
        if self.pool is None:
            return {case: case_charts(self.matrix, case) for case in self.cases}
        try:
            return dict(zip(self.cases, self.pending.get()))
        finally:
            self.pool.close()
            self.pool.join()


SWEEPS = [("batch_size", "batch size"), ("prompt_length", "prompt length (tokens)")]


def _tokens_per_second(run: dict[str, Any], mode: str) -> Optional[float]:
    ms = _latency(run, mode)
    return run["batch_size"] * 1000.0 / ms if ms else None


def sweep_charts(runs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Throughput and peak memory against batch size and against prompt length, where runs vary in them.

    ``runs`` are one case's runs on one build; a line per (config, eager|compiled).
    """
    charts = []
    for field, label in SWEEPS:
        lines: dict[rows.Row, dict[int, dict[str, Any]]] = {}
        for run in runs:
            key = rows.of(run)._replace(**{field: 0})  # every field of the row but the swept one
            lines.setdefault(key, {})[run[field]] = run  # newest run per point (runs are oldest first)
        swept = {k: v for k, v in lines.items() if len(v) > 1}
        if not swept:
            continue
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
            figure, axes = plt.subplots(figsize=(10, 3.6))
            figure.subplots_adjust(left=0.1, right=0.66, bottom=0.15, top=0.9)
            drawn = 0
            for row, points in list(swept.items())[:MAX_LINES]:
                fixed = rows.config_label(row._asdict(), sizes=tuple(n for n in rows.SIZES if n != field))
                xs = sorted(points)
                for mode, value in values:
                    ys = [value(points[x]) for x in xs]
                    pairs = [(x, y) for x, y in zip(xs, ys) if y is not None]
                    if pairs:
                        axes.plot(*zip(*pairs), marker="o", markersize=3, label=safe(f"{fixed}, {mode}"))
                        drawn += 1
            if not drawn:
                plt.close(figure)
                continue
            charts.append(_swept_axes(figure, axes, swept, label, unit, title))
    return charts


def _swept_axes(figure, axes, swept: dict[Any, dict[int, Any]], label: str, unit: str, title: str) -> tuple[str, str]:
    """A sweep chart's x axis (the swept values, log 2), labels and title: the figure as (title, SVG)."""
    axes.set_xscale("log", base=2)
    ticks = sorted({x for points in swept.values() for x in points})
    axes.set_xticks(ticks)
    axes.set_xticklabels([str(t) for t in ticks])
    axes.minorticks_off()
    axes.set_xlabel(label)
    axes.set_ylabel(unit)
    axes.set_title(title)
    _finish(axes)
    return title, _svg(figure)


def _throughput_bounds(run: dict[str, Any], mode: str) -> Optional[tuple[float, float, float]]:
    """Tokens per second of a steady run, and the bounds its median's 95% interval gives them."""
    value = _tokens_per_second(run, mode)
    low_ms, high_ms = run.get(f"{mode}_ms_low"), run.get(f"{mode}_ms_high")
    if value is None or not low_ms or not high_ms:
        return None
    per = run["batch_size"] * 1000.0
    return value, per / high_ms, per / low_ms


def variant_charts(runs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Compiled throughput (with the interval of each point as a bar) and compiled peak memory against
    each swept field, a line per variant (case) and fixed config: the runs of one build."""
    charts = []
    for field, label in SWEEPS:
        lines: dict[tuple[str, rows.Row], dict[int, dict[str, Any]]] = {}
        for run in runs:
            key = rows.of(run)._replace(case="", case_source="", **{field: 0})
            lines.setdefault((run["case"], key), {})[run[field]] = run  # newest run per point
        swept = {k: v for k, v in lines.items() if len(v) > 1}
        if len({case for case, _ in swept}) < 2:
            continue
        for title, unit, memory in (
            (f"Compiled throughput against {label}, by variant", "tokens / s", False),
            (f"Compiled peak memory against {label}, by variant", "MB", True),
        ):
            figure, axes = plt.subplots(figsize=(10, 3.6))
            figure.subplots_adjust(left=0.1, right=0.66, bottom=0.15, top=0.9)
            for (case, row), points in list(swept.items())[:MAX_LINES]:
                fixed = rows.config_label(row._asdict(), sizes=tuple(n for n in rows.SIZES if n != field))
                xs, ys, below, above = [], [], [], []
                for x in sorted(points):
                    if memory:
                        value = points[x].get("peak_mem_compiled_mb")
                        bounds = None if value is None else (value, value, value)
                    else:
                        bounds = _throughput_bounds(points[x], "compiled")
                    if bounds is not None:
                        xs.append(x)
                        ys.append(bounds[0])
                        below.append(bounds[0] - bounds[1])
                        above.append(bounds[2] - bounds[0])
                if xs:
                    axes.errorbar(xs, ys, yerr=[below, above], marker="o", markersize=3, capsize=3,
                                  label=safe(f"{case}: {fixed}"))  # fmt: skip
            charts.append(_swept_axes(figure, axes, swept, label, unit, title))
    return charts
