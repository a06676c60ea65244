"""The retention policy, pure: which runs keep full detail, which are compacted, which fold into counts.

``retention.prune`` reads the DB, asks these functions, and applies their answer. Here nothing
touches a DB, so each rule is tested on plain values.

- Full detail: on the newest ``keep_builds`` builds of each variant, each row's runs of its newest
  two ``diag run`` invocations (what ``check`` pools on one build).
- Folded into counts: of each build, a row's runs beyond its newest ``keep_runs``; on an older
  build, a row's runs beyond its newest two invocations (a release leg re-runs one build every
  night); and a row's runs on an old nightly where no verdict turns on (``thin_cells``). The first
  two rules never fold the run that decides a cell (``row.deciding_run``: its worst, a crash
  among passes), nor the last run of any of its other statuses (a flaky cell stays flaky): pruning
  thins detail, it never changes what check or the report says.
- Compacted: every other run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Iterable, Optional

from diag.store.typed import TorchBuildRow

Variants = dict[Optional[str], list[TorchBuildRow]]  # the stored builds of each variant (cpu, cu126, ...)

Cell = tuple  # (build id, *row fields)


@dataclass
class Choice:
    kept: set[int] = field(default_factory=set)  # full detail
    surplus: list[int] = field(default_factory=list)  # folded into counts
    thinned: set[Cell] = field(default_factory=set)  # the old-nightly cells whose runs fold


def recent_builds(variants: Variants, keep_builds: int) -> set[int]:
    """Ids of the newest ``keep_builds`` builds of each variant (each list in build order)."""
    return {build["id"] for same in variants.values() for build in same[-keep_builds:]}


def choose(
    runs: Iterable[tuple[int, int, Optional[str], tuple]],
    recent: set[int],
    thin: set[Cell],
    keep_runs: int,
    deciding: frozenset[int] = frozenset(),
) -> Choice:
    """``runs``: (run id, build id, invocation, row) newest first. A run stored before invocations
    were recorded is an invocation of its own. ``deciding``: the run that decides each cell, which
    only a thinned cell (one whose verdict its neighbours repeat) folds, and likewise the deciding run of
    each of a cell's other statuses."""
    choice = Choice()
    per_cell: dict[Cell, tuple[list[int], list[str]]] = {}  # cell -> ([runs seen], invocations newest first)
    for run_id, build_id, invocation, row in runs:
        cell = (build_id, *row)
        seen, invocations = per_cell.setdefault(cell, ([0], []))
        seen[0] += 1
        invocation = invocation or f"run {run_id}"
        if invocation not in invocations:
            invocations.append(invocation)
        newest_two = invocations.index(invocation) < 2
        surplus = seen[0] > keep_runs or not (newest_two or build_id in recent)
        if cell in thin or (surplus and run_id not in deciding):
            choice.surplus.append(run_id)
            if cell in thin:
                choice.thinned.add(cell)
        elif build_id in recent and newest_two:
            choice.kept.add(run_id)
    return choice


def old_nightlies(variants: Variants, thin_after: int) -> dict[int, bool]:
    """Build id -> whether it is the first nightly of its ISO week, for each variant's nightlies
    older than its newest ``thin_after`` builds (each list in build order)."""
    old: dict[int, bool] = {}
    for same in variants.values():
        weeks: set[tuple] = set()
        for build in same[:-thin_after] if len(same) > thin_after else []:
            night = build.get("nightly_date")
            if night:
                week = date.fromisoformat(night).isocalendar()[:2]
                old[build["id"]] = week not in weeks
                weeks.add(week)
    return old


def thin_cells(
    variants: Variants, old: dict[int, bool], outcomes: dict[tuple, dict[int, set]], timed: set[tuple]
) -> set[Cell]:
    """(build id, *row) of old nightlies whose runs fold into counts without changing any verdict.

    ``outcomes``: per row, per build, the set of (status, error key, finding keys) its runs (and its
    folded runs) had; ``timed``: rows with a compiled per-token median. A row's runs on an old
    nightly stay when that build is the row's first or last, or when the row's outcomes there
    differ from the build before or after it with that row: every transition and key change keeps
    both its builds, so ``check``, ``bisect`` over stored builds and the report read the same
    changes. A timed row also stays on the first nightly of each ISO week: a weekly trend. Folded
    runs count as outcomes, so what is folded once stays folded.
    """
    fold: set[Cell] = set()
    if not old:
        return fold
    for same in variants.values():
        position = {build["id"]: index for index, build in enumerate(same)}
        for row, by_build in outcomes.items():
            line = sorted((b for b in by_build if b in position), key=position.__getitem__)
            if not line:
                continue
            keep = {line[0], line[-1]}
            for before, after in zip(line, line[1:]):
                if by_build[before] != by_build[after]:
                    keep.update((before, after))
            fold.update(
                (build_id, *row)
                for build_id in line
                if build_id in old and build_id not in keep and not (old[build_id] and row in timed)
            )
    return fold
