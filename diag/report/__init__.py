"""The static HTML report: ``render`` returns {relative path: content}; ``publish`` writes it.

Layout: ``index.html`` (the matrix over the newest builds, transitions, key
changes), ``matrix-N.html`` (older builds), ``cases/<case>.html`` (trend
charts), ``runs/<id>.html``, and ``report.json`` (a machine-readable index).

Run pages are written for the runs of the newest ``detail_builds`` builds and
for both sides of every transition and key change; older cells link nowhere
and name the run id for ``diag show``. A year of nightlies stays a site of a
few thousand pages instead of one page per stored run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import jinja2

from diag import __version__, artifacts, store
from diag.probe.statuses import STATUSES
from diag.report import charts
from diag.report.model import Matrix, build_matrix, pages, row_label
from diag.text import config_text

BUILDS_PER_PAGE = 25
DETAIL_BUILDS = 30
MAX_LISTED = 300
MANIFEST = ".diag-report-manifest.json"
_DOC_URL = re.compile(r"https?://\S+?/gb/gb\d+\.html")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def case_href(case: str) -> str:
    slug = _UNSAFE.sub("_", case)[:80]
    if slug == case:
        return f"cases/{case}.html"
    return f"cases/{slug}-{hashlib.sha1(case.encode('utf-8', 'replace')).hexdigest()[:8]}.html"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.globals.update(row_label=row_label, case_href=case_href, yesno=_yesno, fmt=_fmt,
                       tool_version=__version__, statuses=STATUSES)
    return env


def _yesno(value: Optional[int]) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _fmt(value: Optional[float], unit: str) -> str:
    return "-" if value is None else f"{value:.3f} {unit}"


def _quantiles(samples: list[float]) -> dict[str, Any]:
    ordered = sorted(samples)
    if len(ordered) < 2:
        value = ordered[0] if ordered else None
        return {"n": len(ordered), "p10": value, "median": value, "p90": value}
    deciles = statistics.quantiles(ordered, n=10)
    return {"n": len(ordered), "p10": f"{deciles[0]:.6f}", "median": f"{statistics.median(ordered):.6f}",
            "p90": f"{deciles[-1]:.6f}"}


def _pruned(timing: dict[str, Any]) -> dict[str, Any]:
    """A series whose raw samples diag prune replaced with its summary."""
    summary = timing.get("summary") or {}
    return {"n": summary.get("n", 0), **{q: f"{summary[q]:.6f}" if summary.get(q) is not None else None
                                         for q in ("p10", "median", "p90")}}


def _artifacts(run: dict[str, Any], out_dir: Path) -> list[tuple[str, str]]:
    return [(label, os.path.relpath(path.resolve(), (out_dir / "runs").resolve()))
            for label, path in artifacts.listing(run.get("artifacts_dir"))]


def detailed_runs(matrix: Matrix, detail_builds: int) -> set[int]:
    """Ids of the runs that get a page of their own."""
    newest = {b["id"] for b in matrix.builds[-detail_builds:]} if detail_builds > 0 else set()
    ids = {cell.run["id"] for (_, build_id), cell in matrix.cells.items() if build_id in newest}
    for row, before, after in [(t.row, t.last_before, t.first_after) for t in matrix.transitions] + \
            [(c.row, c.previous, c.build) for c in matrix.key_changes]:
        for build in (before, after):
            cell = matrix.cell(row, build["id"])
            if cell:
                ids.add(cell.run["id"])
    return ids


def render(db, out_dir: Path, builds_per_page: int = BUILDS_PER_PAGE,
           detail_builds: int = DETAIL_BUILDS) -> dict[str, str]:
    """Every page of the site for ``db``; ``out_dir`` only resolves links to run artifacts."""
    env = _environment()
    runs = store.report_runs(db)
    matrix = build_matrix(store.builds(db), runs, store.finding_keys(db))
    key_texts = store.key_texts(db)
    cases = sorted({row.case for row in matrix.rows})
    paged = detailed_runs(matrix, detail_builds)
    common = {"case_links": [{"name": c, "href": case_href(c)} for c in cases], "paged": paged,
              "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    files: dict[str, str] = {}
    files.update(_matrix_pages(env, matrix, {**common, "run_count": len(runs), "key_texts": key_texts},
                               builds_per_page))
    newest = matrix.builds[-1]["id"] if matrix.builds else None
    for case in cases:
        sweeps = charts.sweep_charts([r for r in runs if r["case"] == case and r["torch_build_id"] == newest])
        files[case_href(case)] = env.get_template("case.html.j2").render(
            root="../", case=case, charts=charts.case_charts(matrix, case), sweeps=sweeps,
            newest=matrix.builds[-1] if matrix.builds else None, max_lines=charts.MAX_LINES, **common)
    template = env.get_template("run.html.j2")
    for run in store.full_runs(db, paged):
        for gb in run["graph_breaks"]:
            match = _DOC_URL.search(gb.get("reason") or "")
            gb["doc_url"] = match.group(0) if match else None
        stats = [{**t, **(_quantiles(t["samples"]) if t.get("samples") is not None else _pruned(t))}
                 for t in run["timings"]]
        files[f"runs/{run['id']}.html"] = template.render(
            root="../", run=run, config_label=config_text(run), timing_stats=stats,
            artifacts=_artifacts(run, out_dir), **common)
    files["report.json"] = json.dumps(_index(matrix), indent=1, default=str)
    return files


def _matrix_pages(env: jinja2.Environment, matrix: Matrix, common: dict[str, Any],
                  builds_per_page: int) -> dict[str, str]:
    chunks = pages(matrix.builds, builds_per_page)
    names = ["index.html"] + [f"matrix-{n}.html" for n in range(2, len(chunks) + 1)]
    labels = [f"{c[0]['version']} … {c[-1]['version']}" if c else "none" for c in chunks]
    transitions = list(reversed(matrix.transitions))
    changes = list(reversed(matrix.key_changes))
    counts = {"build_count": len(matrix.builds), "row_count": len(matrix.rows)}
    files = {}
    for index, (name, chunk) in enumerate(zip(names, chunks)):
        pagination = [{"href": n, "label": label, "current": n == name} for n, label in zip(names, labels)]
        files[name] = env.get_template("index.html.j2").render(
            root="", matrix=matrix, page_builds=chunk, pagination=pagination,
            transitions=transitions[:MAX_LISTED], transitions_hidden=max(0, len(transitions) - MAX_LISTED),
            key_changes=changes[:MAX_LISTED], key_changes_hidden=max(0, len(changes) - MAX_LISTED),
            **counts, **common)
    return files


def _index(matrix: Matrix) -> dict[str, Any]:
    return {
        "builds": [{k: b[k] for k in ("id", "version", "git_version", "nightly_date", "variant")}
                   for b in matrix.builds],
        "rows": [{"row": row._asdict(), "label": f"{row.case} {row_label(row)}",
                  "cells": {str(b["id"]): {"run": c.run["id"], "status": c.run["status"]}
                            for b in matrix.builds if (c := matrix.cell(row, b["id"]))}}
                 for row in matrix.rows],
        "transitions": [{"row": t.row._asdict(), "kind": t.kind, "last_before": t.last_before["version"],
                         "first_after": t.first_after["version"], "run": t.run_id} for t in matrix.transitions],
    }


class ReportError(Exception):
    """The site cannot be written where asked; one line that says why."""


def publish(files: dict[str, str], out_dir: Path) -> dict[str, int]:
    """Write ``files`` under ``out_dir``; remove only files an earlier publish wrote that are now stale.

    The manifest of the previous publish says which files diag wrote. A file that is there and is
    not in it belongs to someone else: ReportError, before anything is written, if diag would
    overwrite it.
    """
    manifest_path = out_dir / MANIFEST
    previous: list[str] = []
    if manifest_path.exists():
        try:
            previous = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            previous = []
    foreign = sorted(r for r in files if (out_dir / r).exists() and r not in set(previous))
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise ReportError(f"{out_dir} holds files diag did not write that the report would overwrite ({shown}); "
                          "move them or choose another --out")
    out_dir.mkdir(parents=True, exist_ok=True)
    for relative, content in files.items():
        target = out_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(target.name + ".tmp")
        temporary.write_text(content, encoding="utf-8")
        os.replace(temporary, target)
    removed = 0
    for relative in set(previous) - set(files):
        stale = out_dir / relative
        if stale.is_file() and out_dir.resolve() in stale.resolve().parents:
            stale.unlink()
            removed += 1
    manifest_path.write_text(json.dumps(sorted(files)), encoding="utf-8")
    return {"written": len(files), "removed": removed}
