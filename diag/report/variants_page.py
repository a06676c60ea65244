"""The variants page: on the newest build, each timed case set against the first one by name
(``diag compare --case A --case B``'s verdicts, per point of a sweep), and throughput and peak memory
against the swept parameter, a line per variant with the 95% interval of each point as a bar."""

from __future__ import annotations

from typing import Any, Optional

from diag import store, variants
from diag.report import charts


def context(db, builds: list[dict[str, Any]], runs: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """What variants.html shows, or None where the newest build has fewer than two timed cases."""
    if not builds:
        return None
    newest = builds[-1]
    timed = [r for r in runs if r["torch_build_id"] == newest["id"] and r.get("eager_ms_per_token") is not None]
    cases = sorted({r["case"] for r in timed})
    if len(cases) < 2:
        return None
    full = list(store.full_runs(db, [r["id"] for r in timed]))
    by_case: dict[str, list[dict[str, Any]]] = {}
    for run in full:
        by_case.setdefault(run["case"], []).append(run)
    reference = cases[0]
    against = [(case, variants.compare(by_case[reference], by_case[case])) for case in cases[1:]]
    return {
        "build": newest,
        "reference": reference,
        "against": [(case, points) for case, points in against if points],
        "charts": charts.variant_charts(full),
        "min_effect": variants.MIN_EFFECT,
    }
