"""What the report shows, computed from stored runs: build order, the matrix, transitions. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from diag import row as rows
from diag.probe.statuses import WORKS
from diag.regress import version_order

RowKey = rows.Row


def row_label(row: RowKey) -> str:
    """The row beside its case column: where the case came from (when not built in) and its config."""
    return rows.describe(row._asdict())


@dataclass
class Cell:
    run: dict[str, Any]
    changed: bool = False  # the status differs from the previous build that has a run in this row


@dataclass
class Transition:
    row: RowKey
    kind: str  # regression | fix
    last_before: dict[str, Any]  # build
    first_after: dict[str, Any]  # build
    status_before: str
    status_after: str
    run_id: int
    error: Optional[str] = None  # the first bad run's error: type and the first line of its message

    @property
    def commit_range(self) -> Optional[str]:
        before, after = self.last_before.get("git_version"), self.first_after.get("git_version")
        return f"{before}...{after}" if before and after else None


@dataclass
class KeyChange:
    row: RowKey
    build: dict[str, Any]
    previous: dict[str, Any]
    appeared: list[tuple[str, str]] = field(default_factory=list)
    disappeared: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Matrix:
    builds: list[dict[str, Any]]
    rows: list[RowKey]
    cells: dict[tuple[RowKey, int], Cell]
    transitions: list[Transition]
    key_changes: list[KeyChange]

    def cell(self, row: RowKey, build_id: int) -> Optional[Cell]:
        return self.cells.get((row, build_id))


def build_matrix(builds: list[dict[str, Any]], runs: list[dict[str, Any]],
                 keys: dict[int, set[tuple[str, str]]]) -> Matrix:
    """The newest run of each row x build, with status changes, transitions and key changes."""
    ordered = sorted(builds, key=version_order)
    latest: dict[tuple[RowKey, int], dict[str, Any]] = {}
    for run in runs:  # oldest first: a later run of the same row and build replaces an earlier one
        latest[(rows.of(run), run["torch_build_id"])] = run
    row_keys = sorted({row for row, _ in latest}, key=rows.sort_key)
    used = {build_id for _, build_id in latest}
    ordered = [b for b in ordered if b["id"] in used]
    cells: dict[tuple[RowKey, int], Cell] = {}
    transitions: list[Transition] = []
    changes: list[KeyChange] = []
    for row in row_keys:
        previous: Optional[tuple[dict[str, Any], dict[str, Any]]] = None
        for build in ordered:
            run = latest.get((row, build["id"]))
            if run is None:
                continue
            cell = Cell(run)
            if previous is not None:
                before_build, before_run = previous
                cell.changed = before_run["status"] != run["status"]
                transition = _transition(row, before_build, before_run, build, run)
                if transition:
                    transitions.append(transition)
                change = _key_change(row, before_build, keys.get(before_run["id"], set()), build,
                                     keys.get(run["id"], set()))
                if change:
                    changes.append(change)
            cells[(row, build["id"])] = cell
            previous = (build, run)
    # newest first by the build where the change showed, regressions before fixes: with many rows,
    # the newest regression is at the top however its row is named
    position = {build["id"]: index for index, build in enumerate(ordered)}
    transitions.sort(key=lambda t: (position[t.first_after["id"]], t.kind == "regression"))
    changes.sort(key=lambda c: position[c.build["id"]])
    return Matrix(ordered, row_keys, cells, transitions, changes)


def _transition(row: RowKey, before_build, before_run, build, run) -> Optional[Transition]:
    was_good, is_good = before_run["status"] in WORKS, run["status"] in WORKS
    if was_good == is_good:
        return None
    error = None
    if run.get("error_type"):
        first_line = (run.get("error_message") or "").strip().splitlines()[:1]
        error = run["error_type"] + (f": {first_line[0]}" if first_line else "")
    return Transition(row, "fix" if is_good else "regression", before_build, build, before_run["status"],
                      run["status"], run["id"], error)


def _key_change(row: RowKey, before_build, before: set, build, after: set) -> Optional[KeyChange]:
    appeared, disappeared = sorted(after - before), sorted(before - after)
    if not appeared and not disappeared:
        return None
    return KeyChange(row, build, before_build, appeared, disappeared)


def pages(items: list, size: int) -> list[list]:
    """``items`` in chunks of ``size``, newest chunk first (items are oldest first)."""
    chunks = [items[max(0, end - size):end] for end in range(len(items), 0, -size)]
    return chunks or [[]]
