"""A page per graph break: per GB id (torch's own id for a kind of break, stable across builds from
2.8), and per graph-break key for breaks without one. Where it was first and last seen, the builds
and cases it shows up on, the message as torch words it on each build, the command that reproduces
it, and torch's registry entry for the id."""

from __future__ import annotations

from typing import Any

from diag import store
from diag.pages import page_path
from diag.report.model import Matrix
from diag.upstream import gb_id_of_key, registry_url


def href(key: str) -> str:
    return page_path("breaks", key, 60)


def contexts(db, matrix: Matrix) -> list[dict[str, Any]]:
    """One dict per graph-break key of the stored runs, most widespread first (then by key)."""
    order = {build["id"]: index for index, build in enumerate(matrix.builds)}
    builds = {build["id"]: build for build in matrix.builds}
    found: dict[str, dict[str, Any]] = {}
    query = """SELECT g.key, g.gb_type, g.reason, g.resumable, g.location, g.count, r.id, r."case", r.torch_build_id
               FROM graph_breaks g JOIN runs r ON r.id = g.run_id ORDER BY r.id"""
    for key, gb_type, reason, resumable, location, count, run_id, case, build_id in db.execute(query).fetchall():
        if not key or build_id not in order:
            continue
        entry = found.setdefault(
            key,
            {
                "key": key,
                "gb_type": gb_type,
                "builds": {},
                "cases": set(),
                "runs": 0,
                "count": 0,
                "newest": (-1, 0),
                "locations": set(),
                "resumable": set(),
            },
        )
        entry["builds"].setdefault(build_id, (reason or "").strip())
        entry["cases"].add(case)
        entry["runs"] += 1
        entry["count"] += count or 1
        entry["resumable"].add(resumable)
        if location:
            entry["locations"].add(location)
        entry["newest"] = max(entry["newest"], (order[build_id], run_id))  # the repro: its newest run
    pages = []
    for key, entry in found.items():
        seen = sorted(entry["builds"], key=order.__getitem__)
        wordings: list[dict[str, Any]] = []
        for build_id in seen:
            text = entry["builds"][build_id]
            if wordings and wordings[-1]["text"] == text:
                wordings[-1]["last"] = builds[build_id]
                wordings[-1]["builds"] += 1
            else:
                wordings.append({"text": text, "first": builds[build_id], "last": builds[build_id], "builds": 1})
        doc = store.DOC_URL.search(" ".join(entry["builds"].values()))
        gb_id = gb_id_of_key(key)
        pages.append(
            {
                "key": key,
                "href": href(key),
                "gb_id": gb_id,
                "registry": doc.group(0) if doc else (registry_url(gb_id) if gb_id else None),
                "title": entry["gb_type"] or (wordings[-1]["text"].splitlines() or [key])[0],
                "first": builds[seen[0]],
                "last": builds[seen[-1]],
                "newest_build": matrix.builds[-1] if matrix.builds else None,
                "build_count": len(seen),
                "cases": sorted(entry["cases"]),
                "runs": entry["runs"],
                "count": entry["count"],
                "wordings": wordings,
                "locations": sorted(entry["locations"])[:10],
                "resumable": sorted(
                    {"resumed" if value else "not resumed" for value in entry["resumable"] if value is not None}
                ),
                "repro_run": entry["newest"][1],
            }
        )
    return sorted(pages, key=lambda page: (-page["build_count"], -page["runs"], page["key"]))
