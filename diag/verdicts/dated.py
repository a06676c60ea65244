"""The change points of a DB's history (``changes.py`` on its runs): what ``diag changes`` lists,
what ``check --changes`` adds tonight, and what the report marks."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Sequence

from diag import store
from diag.build import order as build_order
from diag.store.typed import TorchBuildRow
from diag.verdicts import changes as changes_of


class Searched(NamedTuple):
    changes: list[changes_of.Change]
    series: list[changes_of.Series]
    said: str  # what the runner was told apart by
    twins: Optional[changes_of.Twins]
    twin: Optional[TorchBuildRow]


TWIN_NIGHTS = 6  # a release run on this many nights or more can be the runner's stable twin


def guessed_twin(builds: dict[int, TorchBuildRow], nights: dict[int, int]) -> Optional[TorchBuildRow]:
    """The release (no nightly date) whose runs span the most nights (``nights``: per build id), at
    least ``TWIN_NIGHTS``: what a nightly runner runs beside each night's nightly. None where no
    release was run so."""
    releases = [(count, build_id) for build_id, count in nights.items() if build_id in builds]
    releases = [item for item in releases if not builds[item[1]].get("nightly_date")]
    best = max(releases, default=None)
    return builds[best[1]] if best and best[0] >= TWIN_NIGHTS else None


def found(
    db: Any, stable: Optional[str], metrics: Sequence[str], case: Optional[str] = None, guess: bool = False
) -> Searched:
    """The change points of the DB's history (of ``metrics``, of ``case`` where given). ``stable``
    names the runner's stable twin; without it, ``guess`` takes ``guessed_twin``."""
    builds = {b["id"]: b for b in store.builds(db)}
    if not builds:
        raise store.StoreError("the database has no runs to search for change points")
    runs = [r for r in store.report_runs(db) if case is None or r.get("case") == case]
    twin = (
        store.find_build(db, stable) if stable else guessed_twin(builds, store.nights_per_build(db)) if guess else None
    )
    return of_runs(runs, builds, metrics, twin, named=bool(stable))


def of_runs(
    runs: Sequence[Any],
    builds: dict[int, TorchBuildRow],
    metrics: Sequence[str],
    twin: Optional[TorchBuildRow],
    named: bool = True,
) -> Searched:
    """The change points of ``runs`` (each build's id in ``builds``), the runner told apart by ``twin``
    where there is one (``named``: by the user; else guessed)."""
    series = changes_of.series_of(runs, builds, metrics, skip=twin["id"] if twin else None)
    twins = changes_of.twin_nights(runs, twin["id"], metrics) if twin else None
    version = (twin.get("version") or "?") if twin else None
    said = (
        f"runner changes told apart by stable {version}'s own points, one a night"
        + ("" if named else f" (the release run on the most nights, {TWIN_NIGHTS} or more)")
        if twin
        else "runner changes not told apart: pass --stable BUILD, a pinned release the same runner ran each night"
    )
    return Searched(changes_of.changes(series, twins, version), series, said, twins, twin)


def tonight(db: Any, stable: Optional[str], limit: Callable[[str], float]) -> list[changes_of.Change]:
    """``check --changes``: the change points past ``limit(metric)`` that the history without each
    variant's newest build did not have (``changes.tonight``). StoreError on a DB with no runs."""
    now = found(db, stable, list(changes_of.METRICS))
    newest: dict[Optional[str], TorchBuildRow] = {}
    for build in (b for series in now.series for b in series.builds):  # the twin's are not in a series
        known = newest.get(build.get("variant"))
        newest[build.get("variant")] = build if known is None or build_order(build) > build_order(known) else known
    version = (now.twin.get("version") or "?") if now.twin else None
    before = changes_of.changes(changes_of.without(now.series, {b["id"] for b in newest.values()}), now.twins, version)
    return changes_of.tonight(now.changes, before, limit)
