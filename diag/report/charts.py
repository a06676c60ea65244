"""Trend charts across torch builds, drawn with matplotlib and inlined as SVG."""

from __future__ import annotations

import io
from typing import Any, Callable, Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from diag import row as rows  # noqa: E402
from diag.report.model import Matrix, RowKey, row_label  # noqa: E402

# Labels are stored values (case names, configs): never read "$...$" in them as mathtext.
plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "text.parse_math": False})

MAX_LINES = 8
MAX_TICKS = 12
MAX_MARKED_POINTS = 40  # beyond this many builds, markers only clutter the line and bloat the SVG


def _speedup(run: dict[str, Any]) -> Optional[float]:
    eager, compiled = run.get("eager_ms_per_token"), run.get("compiled_ms_per_token")
    return eager / compiled if eager and compiled else None


Metric = tuple[str, str, Callable[[dict[str, Any]], Optional[float]]]
METRICS: list[Metric] = [
    ("Compile time", "seconds", lambda r: r.get("compile_s")),
    ("Eager per-token latency", "ms / token", lambda r: r.get("eager_ms_per_token")),
    ("Compiled per-token latency", "ms / token", lambda r: r.get("compiled_ms_per_token")),
    ("Speedup (eager / compiled)", "x", _speedup),
    ("Peak memory, compiled", "MB", lambda r: r.get("peak_mem_compiled_mb")),
]


def _svg(figure) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg")
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def trend(matrix: Matrix, row_keys: list[RowKey], metric: Metric) -> Optional[str]:
    """One SVG line chart of ``metric`` over builds, a line per row; None when no run has a value."""
    title, unit, value = metric
    labels = [b["version"] for b in matrix.builds]
    figure, axes = plt.subplots(figsize=(9.5, 4.2))
    figure.subplots_adjust(left=0.08, right=0.98, bottom=0.42, top=0.92)
    marker = "o" if len(labels) <= MAX_MARKED_POINTS else None
    drawn = 0
    for row in row_keys[:MAX_LINES]:
        xs, ys = [], []
        for index, build in enumerate(matrix.builds):
            cell = matrix.cell(row, build["id"])
            y = value(cell.run) if cell else None
            if y is not None:
                xs.append(index)
                ys.append(y)
        if xs:
            axes.plot(xs, ys, marker=marker, markersize=3, linewidth=1.2, label=row_label(row))
            drawn += 1
    if not drawn:
        plt.close(figure)
        return None
    step = max(1, len(labels) // MAX_TICKS)
    axes.set_xticks(range(0, len(labels), step))
    axes.set_xticklabels(labels[::step], rotation=30, ha="right")
    axes.set_xlabel("torch build")
    axes.set_ylabel(unit)
    axes.set_title(title)
    _finish(axes)
    return _svg(figure)


def _finish(axes) -> None:
    """Grid, and the legend under the plot where long config labels fit."""
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.32), ncol=2, frameon=False)


def case_charts(matrix: Matrix, case: str) -> list[tuple[str, str]]:
    """(title, svg) for every metric with data, for the rows of ``case``."""
    case_rows = [row for row in matrix.rows if row.case == case]
    charts = []
    for metric in METRICS:
        svg = trend(matrix, case_rows, metric)
        if svg:
            charts.append((metric[0], svg))
    return charts


SWEEPS = [("batch_size", "batch size"), ("prompt_length", "prompt length (tokens)")]


def _tokens_per_second(run: dict[str, Any], mode: str) -> Optional[float]:
    ms = run.get(f"{mode}_ms_per_token")
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
                (f"Throughput against {label}", "tokens / s",
                 [("eager", lambda r: _tokens_per_second(r, "eager")), ("compiled", lambda r: _tokens_per_second(r, "compiled"))]),
                (f"Peak memory against {label}", "MB",
                 [("eager", lambda r: r.get("peak_mem_eager_mb")), ("compiled", lambda r: r.get("peak_mem_compiled_mb"))])):
            figure, axes = plt.subplots(figsize=(9.5, 4.2))
            figure.subplots_adjust(left=0.08, right=0.98, bottom=0.42, top=0.92)
            drawn = 0
            for row, points in list(swept.items())[:MAX_LINES]:
                fixed = rows.config_label(row._asdict(), sizes=tuple(n for n in rows.SIZES if n != field))
                xs = sorted(points)
                for mode, value in values:
                    ys = [value(points[x]) for x in xs]
                    pairs = [(x, y) for x, y in zip(xs, ys) if y is not None]
                    if pairs:
                        axes.plot(*zip(*pairs), marker="o", markersize=3,
                                  label=f"{fixed}, {mode}")
                        drawn += 1
            if not drawn:
                plt.close(figure)
                continue
            axes.set_xscale("log", base=2)
            ticks = sorted({x for points in swept.values() for x in points})
            axes.set_xticks(ticks)
            axes.set_xticklabels([str(t) for t in ticks])
            axes.minorticks_off()
            axes.set_xlabel(label)
            axes.set_ylabel(unit)
            axes.set_title(title)
            _finish(axes)
            charts.append((title, _svg(figure)))
    return charts
