"""The architectures page's entries: per transformers architecture (the ``hf:<model_type>`` cases of
diag/run/catalog.py), its fullgraph verdict and the graph breaks in its way."""

from __future__ import annotations

from typing import Any

from diag.report.model import Matrix


def hf_architectures(matrix: Matrix, keys: dict[int, set[tuple[str, str]]], prefix: str) -> list[dict[str, Any]]:
    """Per transformers architecture (the hf:<model_type> cases): the fullgraph verdict and, from the
    no-fullgraph run on the same newest build, the graph breaks that stand in fullgraph's way."""
    found = []
    for verdict in matrix.verdicts:
        if not verdict.case.startswith(prefix) or not verdict.fullgraph:
            continue
        partner = next(
            (v for v in matrix.verdicts if v.case == verdict.case and not v.fullgraph and v.variant == verdict.variant),
            None,
        )
        breaks: list[str] = []
        if partner is not None:
            for row in matrix.rows:
                if row.case == verdict.case and not row.fullgraph:
                    cell = matrix.cell(row, partner.newest["id"])
                    if cell is not None:
                        breaks += sorted(key for kind, key in keys.get(cell.run["id"], set()) if kind == "graph_breaks")
        found.append(
            {"name": verdict.case[len(prefix) :], "verdict": verdict, "partner": partner, "breaks": sorted(set(breaks))}
        )
    order = {"works": 0, "flaky": 1, "partly": 2, "fails": 3, "broken": 4}
    return sorted(found, key=lambda a: (order[a["verdict"].state], a["name"]))
