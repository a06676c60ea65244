"""What a run page shows beside the stored run: its timing series in ms, links to its run directory's
files, and the CI run that keeps the directory once the machine is gone."""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any, Optional

from diag.report.inputs import Carried
from diag.run import artifacts
from diag.store.typed import StoredRun, TimingRow


def quantiles(samples: list[float]) -> dict[str, Any]:
    ordered = sorted(samples)
    if len(ordered) < 2:
        value = ordered[0] if ordered else None
        return {"n": len(ordered), "p10": value, "median": value, "p90": value}
    deciles = statistics.quantiles(ordered, n=10)
    return {
        "n": len(ordered),
        "p10": f"{deciles[0]:.6f}",
        "median": f"{statistics.median(ordered):.6f}",
        "p90": f"{deciles[-1]:.6f}",
    }


def in_ms(timing: TimingRow) -> dict[str, Any]:
    """A timing series' n and quantiles for the run page; seconds shown as ms, as the medians beside them are."""
    scale = 1000.0 if timing.get("unit") == "s" else 1.0
    samples = timing.get("samples")
    if samples is not None:
        found = quantiles([value * scale for value in samples])
    else:
        summary = timing.get("summary") or {}
        found = _pruned(
            {**timing, "summary": {k: v * scale if k != "n" and v is not None else v for k, v in summary.items()}}
        )
    return {**timing, **found, "unit": "ms" if scale != 1.0 else timing.get("unit")}


def _pruned(timing: TimingRow) -> dict[str, Any]:
    """A series whose raw samples diag prune replaced with its summary."""
    summary = timing.get("summary") or {}
    return {
        "n": summary.get("n", 0),
        **{q: f"{summary[q]:.6f}" if summary.get(q) is not None else None for q in ("p10", "median", "p90")},
    }


CARRIED = "artifacts"  # the site's folder of the run directories it carries, one folder per run id


def listing(run: StoredRun, carry: bool) -> list[tuple[str, Optional[str]]]:
    """The run's artifacts: each with its address in the site where it carries them (relative to the
    run pages' folder), else with none: a link out of the site breaks once the site is published."""
    root = run.get("artifacts_dir")
    found: list[tuple[str, Optional[str]]] = []
    for label, path in artifacts.listing(root):
        if path.is_dir() and (path / "index.html").is_file():  # tlparse's report: its page, not a folder
            path = path / "index.html"
        found.append((label, f"../{CARRIED}/{run['id']}/{path.relative_to(str(root)).as_posix()}" if carry else None))
    return found


def carried(run_id: int, directory: Optional[str]) -> dict[str, Carried]:
    """The site's copy of a run's directory, every file of it: what ``listing`` links, and what those
    link in turn (a tlparse report's pages, the trace beside it). Nothing where the directory is gone."""
    root = Path(directory) if directory else None
    if root is None or not root.is_dir():
        return {}
    return {
        f"{CARRIED}/{run_id}/{file.relative_to(root).as_posix()}": Carried(str(file))
        for file in sorted(root.rglob("*"))
        if file.is_file()
    }


_REPOSITORY = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_SERVER = re.compile(r"https://[A-Za-z0-9.-]+(:\d+)?")


def ci_link(run: StoredRun) -> Optional[dict[str, str]]:
    """Where the CI job that made ``run`` keeps its run directory (runner.ci_provenance): the workflow
    run's page, the artifact's name and the directory's path in it. None where the run was not made in
    CI or what it recorded does not make a plain https link."""
    ci = (run.get("extra") or {}).get("ci") or {}
    server, repository, run_id = ci.get("server"), ci.get("repository"), str(ci.get("run_id") or "")
    if not (
        isinstance(server, str)
        and _SERVER.fullmatch(server)
        and isinstance(repository, str)
        and _REPOSITORY.fullmatch(repository)
        and run_id.isdigit()
    ):
        return None
    attempt = str(ci.get("run_attempt") or "")
    url = f"{server}/{repository}/actions/runs/{run_id}" + (f"/attempts/{attempt}" if attempt.isdigit() else "")
    return {"url": url, "run_id": run_id, "artifact": str(ci.get("artifact") or ""), "path": str(ci.get("path") or "")}
