"""A page per graph break: per GB id (torch's own id for a kind of break, stable across builds from
2.8), and per graph-break key for breaks without one; and a page per hidden-error key (an error torch
swallowed). Where it was first and last seen, the builds and cases it shows up on, the message as
torch words it on each build, the command that reproduces it, and torch's registry entry for a GB id."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Optional

from diag import store
from diag.pages import page_path
from diag.report.inputs import Memo
from diag.report.model import Matrix
from diag.store.typed import TorchBuildRow
from diag.upstream import gb_id_of_key, registry_url


@dataclass(frozen=True)
class Kind:
    """A kind of finding with a page per key."""

    memo: str  # what a build's summary is kept as (inputs.Memo)
    folder: str  # where its pages are
    rows: Callable[..., list[tuple[Any, ...]]]  # the store's rows of it, in break_rows' shape
    registry: bool  # torch's GB ids and their registry apply
    noun: str  # what one key's page says it is


BREAKS = Kind("graph breaks", "breaks", store.break_rows, True, "graph break")
HIDDEN = Kind("hidden errors", "hidden", store.hidden_rows, False, "hidden error: an error torch swallowed")


def href(key: str, kind: Kind = BREAKS) -> str:
    return page_path(kind.folder, key, 60)


Summary = dict[str, dict[str, Any]]  # per graph-break key: what one build's runs recorded of it


def build_summaries(db, builds: list[TorchBuildRow], every: bool = False, kind: Kind = BREAKS) -> dict[int, Summary]:
    """Per build of ``builds``, per key of ``kind`` its runs recorded: the first finding's run id and
    gb_type, its first wording, the cases, how many findings and breaks, the newest run, where in
    the model code, whether torch resumed. A function of the build's runs alone (``inputs.Memo``).
    ``every``: ``builds`` are all the builds with runs, read in one pass over the table."""
    ids = {build["id"] for build in builds}
    found: dict[int, Summary] = {build_id: {} for build_id in ids}
    # a night's: the new builds' runs alone, found by the index on their build
    for key, gb_type, reason, resumable, location, count, run_id, case, build_id in kind.rows(
        db, None if every else ids
    ):
        if not key or build_id not in ids:
            continue
        entry = found[build_id].get(key)
        if entry is None:
            entry = found[build_id][key] = {
                "first": run_id,
                "gb_type": gb_type,
                "reason": (reason or "").strip(),
                "cases": [],
                "runs": 0,
                "count": 0,
                "newest": run_id,
                "locations": [],
                "resumable": [],
            }
        if case not in entry["cases"]:
            entry["cases"].append(case)
        entry["runs"] += 1
        entry["count"] += count or 1
        entry["newest"] = run_id
        if location and location not in entry["locations"]:
            entry["locations"].append(location)
        if resumable not in entry["resumable"]:
            entry["resumable"].append(resumable)
    return found


def contexts(db, matrix: Matrix, memo: Optional[Memo] = None, kind: Kind = BREAKS) -> list[dict[str, Any]]:
    """One dict per key of ``kind`` in the stored runs, most widespread first (then by key). With a
    ``memo``, a build's summary is read from the DB only where the memo keeps none."""
    wanted = [build for build in matrix.builds if memo is None or not memo.has(kind.memo, build)]
    made = build_summaries(db, wanted, len(wanted) == len(matrix.builds), kind) if wanted else {}
    summaries = [
        (
            build,
            made.get(build["id"], {})
            if memo is None
            else memo.of(kind.memo, build, functools.partial(made.__getitem__, build["id"])),
        )
        for build in matrix.builds
    ]
    pages = [_page(key, entry, matrix, kind) for key, entry in _by_key(summaries, matrix).items()]
    return sorted(pages, key=lambda page: (-page["build_count"], -page["runs"], page["key"]))


def _by_key(summaries: list[tuple[TorchBuildRow, Summary]], matrix: Matrix) -> dict[str, dict[str, Any]]:
    """The builds' summaries folded per key: where it was first seen, each build's wording, the cases,
    runs, events, locations and the newest run that shows it."""
    order = {build["id"]: index for index, build in enumerate(matrix.builds)}
    found: dict[str, dict[str, Any]] = {}
    for build, summary in summaries:
        for key, part in summary.items():
            entry = found.setdefault(
                key,
                {
                    "key": key,
                    "first": (part["first"], part["gb_type"]),
                    "builds": {},
                    "cases": set(),
                    "runs": 0,
                    "count": 0,
                    "newest": (-1, 0),
                    "locations": set(),
                    "resumable": set(),
                },
            )
            entry["first"] = min(entry["first"], (part["first"], part["gb_type"]), key=lambda first: first[0])
            entry["builds"][build["id"]] = (part["first"], part["reason"])
            entry["cases"].update(part["cases"])
            entry["runs"] += part["runs"]
            entry["count"] += part["count"]
            entry["resumable"].update(part["resumable"])
            entry["locations"].update(part["locations"])
            entry["newest"] = max(entry["newest"], (order[build["id"]], part["newest"]))
    for entry in found.values():  # each build's wording, in the order of the runs that first showed it
        entry["gb_type"] = entry["first"][1]
        entry["builds"] = {b: reason for b, (_, reason) in sorted(entry["builds"].items(), key=lambda i: i[1][0])}
    return found


def _page(key: str, entry: dict[str, Any], matrix: Matrix, kind: Kind) -> dict[str, Any]:
    """The page of one key: its wordings build by build (consecutive builds that word it alike as one)."""
    order = {build["id"]: index for index, build in enumerate(matrix.builds)}
    builds = {build["id"]: build for build in matrix.builds}
    seen = sorted(entry["builds"], key=order.__getitem__)
    wordings: list[dict[str, Any]] = []
    for build_id in seen:
        text = entry["builds"][build_id]
        if wordings and wordings[-1]["text"] == text:
            wordings[-1]["last"] = builds[build_id]
            wordings[-1]["builds"] += 1
        else:
            wordings.append({"text": text, "first": builds[build_id], "last": builds[build_id], "builds": 1})
    doc = store.DOC_URL.search(" ".join(entry["builds"].values())) if kind.registry else None
    gb_id = gb_id_of_key(key) if kind.registry else None
    return {
        "key": key,
        "href": href(key, kind),
        "gb_id": gb_id,
        "registry": doc.group(0) if doc else (registry_url(gb_id) if gb_id else None),
        "title": (entry["gb_type"] if kind.registry else None) or (wordings[-1]["text"].splitlines() or [key])[0],
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
