"""What the report shows, computed from stored runs: build order, the matrix, transitions, verdicts. Pure.

A cell is every run of one row on one build. Its status is its deciding run's
(``regress.deciding_run``: the worst, as ``diag check`` reads it too): a failure among repeats is
never outvoted, and the same runs give the same verdicts in whatever order they were stored. A cell
whose runs partly failed is flaky, and says how many failed. Transitions and key changes are
between consecutive builds of one variant (a CUDA nightly is not the next build after a CPU one),
again as ``check`` pairs them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Iterator, Optional

from diag import row as rows
from diag.build import order as build_order
from diag.contract import BY_NAME, WORKS
from diag.regress import deciding_run

RowKey = rows.Row


def row_label(row: RowKey) -> str:
    """The row beside its case column: where the case came from (when not built in) and its config."""
    return rows.describe(row._asdict())


def error_line(run: dict[str, Any]) -> Optional[str]:
    """A run's error: its type and the first line of its message."""
    if not run.get("error_type"):
        return None
    first = (run.get("error_message") or "").strip().splitlines()[:1]
    return run["error_type"] + (f": {first[0]}" if first else "")


class Cell:
    """Every run of one row on one build. A plain class with slots: a history has one per run."""

    __slots__ = ("runs", "changed", "run", "working", "state")

    def __init__(self, runs: list[dict[str, Any]]) -> None:
        self.runs = runs  # every run of the row on the build, oldest first
        self.changed = False  # the status differs from the previous build of the variant with a run in this row
        if len(runs) == 1:  # most cells: decided without a sort or a count
            self.run = runs[0]  # the deciding run: the cell's status, as ``diag check`` reads it
            works = self.run["status"] in WORKS
            self.working, self.state = (1, "works") if works else (0, "fails")
            return
        self.run = deciding_run(runs)
        self.working = sum(1 for r in runs if r["status"] in WORKS)  # runs that worked
        # works (every run), flaky (some runs failed, some worked) or fails (none worked)
        self.state = "works" if self.working == len(runs) else ("fails" if self.working == 0 else "flaky")

    @property
    def worst(self) -> str:
        return max((r["status"] for r in self.runs), key=lambda s: BY_NAME[s].severity if s in BY_NAME else 9)

    @property
    def mixed(self) -> bool:
        return len({r["status"] for r in self.runs}) > 1

    @property
    def tally(self) -> str:
        """``3/5 work``; empty for a single run."""
        return f"{self.working}/{len(self.runs)} work" if len(self.runs) > 1 else ""

    @property
    def split(self) -> list[tuple[str, dict[str, Any]]]:
        """Where the cell's runs differ in something the row does not name (the Python minor, the
        transformers version), each side's label and deciding run: ``[("Python 3.10", run), ...]``.
        Empty when every run shares them."""
        if len(self.runs) < 2:
            return []
        sides: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for run in self.runs:
            sides.setdefault(identity_of(run), []).append(run)
        if len(sides) < 2:
            return []
        pythons = {python for python, _ in sides}
        versions = {version for _, version in sides}
        found = []
        for (python, version), members in sorted(sides.items()):
            label = []
            if len(pythons) > 1:
                label.append(f"Python {python or '?'}")
            if len(versions) > 1:
                label.append(f"transformers {version or 'none'}")
            found.append((", ".join(label), deciding_run(members)))
        return found


def identity_of(run: dict[str, Any]) -> tuple[str, str]:
    """What a run's outcome may depend on beyond its row and build: its Python minor version and
    its transformers version."""
    python = ".".join((run.get("python") or "").split(".")[:2])
    return python, run.get("transformers_version") or ""


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
    environment: Optional[str] = None  # what else changed: "transformers 4.56.2 -> 4.57.0"
    before_run_id: Optional[int] = None  # the run that decided the cell before the change

    @property
    def commit_range(self) -> Optional[str]:
        return commit_range(self.last_before, self.first_after)


def commit_range(before: Optional[dict[str, Any]], after: Optional[dict[str, Any]]) -> Optional[str]:
    """``a...b`` for GitHub's compare view, when both builds name their commit."""
    if not before or not after:
        return None
    a, b = before.get("git_version"), after.get("git_version")
    return f"{a}...{b}" if a and b else None


@dataclass
class KeyChange:
    row: RowKey
    build: dict[str, Any]
    previous: dict[str, Any]
    appeared: list[tuple[str, str]] = field(default_factory=list)
    disappeared: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Episode:
    """A stretch of consecutive builds on which a row failed."""

    row: RowKey
    first_bad: dict[str, Any]
    last_good: Optional[dict[str, Any]]  # the build before it (None: failing from the row's first build)
    last_bad: dict[str, Any]
    fixed_in: Optional[dict[str, Any]]  # None: still failing on the row's newest build
    error: Optional[str]  # of the first bad run
    rows: int = 1  # how many of the group's rows failed over the same stretch

    @property
    def commits(self) -> Optional[str]:
        return commit_range(self.last_good, self.first_bad)

    @property
    def fix_commits(self) -> Optional[str]:
        return commit_range(self.last_bad, self.fixed_in)


@dataclass
class Verdict:
    """One line of the front page: a case in one fullgraph mode, over its configs and every build."""

    case: str
    fullgraph: int
    variant: Optional[str]  # None: one history over every variant, each build naming its own
    state: str  # works | flaky | partly | fails
    working: int  # rows that work on the newest build
    total: int
    since: dict[str, Any]  # the oldest build of the current unbroken state
    newest: dict[str, Any]
    episode: Optional[Episode]  # the newest regression of one of its rows (current or fixed), else the
    # failure of a row that never worked
    strip: list[tuple[dict[str, Any], str, str]]  # newest first: (build, state, "k/m work")
    errors: list[str]  # the newest build's errors, most frequent first (of each cell's deciding run)
    runs_failed: int = 0  # of the newest build's runs in these rows, how many failed
    runs: int = 0
    hidden: list[str] = field(default_factory=list)  # hidden-error keys of the newest build's runs, most runs first
    flips: int = 0  # the most transitions any of its rows had over the history

    @property
    def flaky(self) -> bool:
        return self.flips >= FLAKY_FLIPS

    @property
    def mode(self) -> str:
        return "fullgraph" if self.fullgraph else "no-fullgraph"


FLAKY_FLIPS = 4  # transitions of one row (two regressions and two fixes) that make it flaky, not a one-off


@dataclass
class Matrix:
    builds: list[dict[str, Any]]  # oldest first
    rows: list[RowKey]
    by_row: dict[RowKey, dict[int, Cell]]  # per row, its cell on each build id it has runs on
    transitions: list[Transition]  # newest first
    key_changes: list[KeyChange]  # newest first
    verdicts: list[Verdict] = field(default_factory=list)
    flips: dict[RowKey, int] = field(default_factory=dict)  # transitions per row, over every build
    transformers: dict[int, list[str]] = field(default_factory=dict)  # per build id: the versions its runs used
    pythons: dict[int, list[str]] = field(default_factory=dict)  # per build id: its runs' Python minor versions

    # Cells are looked up per row, then per build id: a row key is a tuple of a dozen fields, hashed
    # again at every lookup, and a history has hundreds of thousands of lookups. Loops over builds
    # take ``column(row)`` once.
    def column(self, row: RowKey) -> dict[int, Cell]:
        return self.by_row.get(row, _NO_CELLS)

    def cell(self, row: RowKey, build_id: int) -> Optional[Cell]:
        return self.by_row.get(row, _NO_CELLS).get(build_id)

    def cells(self) -> Iterator[tuple[RowKey, int, Cell]]:
        """Every cell: (row, build id, cell)."""
        for row, column in self.by_row.items():
            for build_id, cell in column.items():
                yield row, build_id, cell


_NO_CELLS: dict[int, Cell] = {}


def _transformers(runs: list[dict[str, Any]]) -> Optional[str]:
    return runs[-1].get("transformers_version")


def build_matrix(
    builds: list[dict[str, Any]], runs: list[dict[str, Any]], keys: dict[int, set[tuple[str, str]]], strip: int = 30
) -> Matrix:
    """Every run of each row x build, with status changes, transitions, key changes and verdicts."""
    grouped: dict[RowKey, dict[int, list[dict[str, Any]]]] = {}
    seen: dict[int, set[tuple[str, str]]] = {}  # per build id: (transformers, Python) of its runs
    fields = itemgetter(*rows.FIELDS)
    made: dict[tuple, RowKey] = {}  # a row key made once per row, not once per run
    for run in sorted(runs, key=itemgetter("id")):
        try:
            row = made.get(fields(run)) or made.setdefault(fields(run), rows.of(run))
        except KeyError:  # a run without every row column: rows.of reads it as NULL
            row = rows.of(run)
        build_id = run["torch_build_id"]
        grouped.setdefault(row, {}).setdefault(build_id, []).append(run)
        seen.setdefault(build_id, set()).add((run.get("transformers_version") or "", run.get("python") or ""))
    row_keys = sorted(grouped, key=rows.sort_key)
    used = {build_id for column in grouped.values() for build_id in column}
    ordered = [b for b in sorted(builds, key=build_order) if b["id"] in used]
    by_row = {row: {build_id: Cell(group) for build_id, group in grouped[row].items()} for row in row_keys}
    transitions: list[Transition] = []
    changes: list[KeyChange] = []
    for variant in sorted({b["variant"] for b in ordered}):
        line = [b for b in ordered if b["variant"] == variant]
        for row in row_keys:
            column = by_row[row]
            previous: Optional[tuple[dict[str, Any], Cell]] = None
            for build in line:
                cell = column.get(build["id"])
                if cell is None:
                    continue
                if previous is not None:
                    before_build, before = previous
                    was, now = before.run["status"], cell.run["status"]
                    if was != now:
                        cell.changed = True
                        transition = _transition(row, before_build, before, build, cell)
                        if transition:
                            transitions.append(transition)
                    had, has = keys.get(before.run["id"], _NONE), keys.get(cell.run["id"], _NONE)
                    if had != has:
                        change = _key_change(row, before_build, had, build, has)
                        if change:
                            changes.append(change)
                previous = (build, cell)
    # newest first by the build where the change showed, regressions before fixes: with many rows,
    # the newest regression is at the top however its row is named
    position = {build["id"]: index for index, build in enumerate(ordered)}
    transitions.sort(key=lambda t: (-position[t.first_after["id"]], t.kind != "regression", rows.sort_key(t.row)))
    changes.sort(key=lambda c: (-position[c.build["id"]], rows.sort_key(c.row)))
    matrix = Matrix(ordered, row_keys, by_row, transitions, changes)
    for transition in transitions:
        matrix.flips[transition.row] = matrix.flips.get(transition.row, 0) + 1
    matrix.verdicts = verdicts(matrix, strip, keys)
    for build_id, found in seen.items():
        matrix.transformers[build_id] = sorted({version for version, _ in found if version})
        matrix.pythons[build_id] = sorted({".".join(p.split(".")[:2]) for _, p in found if p})
    return matrix


def _transition(row: RowKey, before_build, before: Cell, build, cell: Cell) -> Optional[Transition]:
    was_good, is_good = before.run["status"] in WORKS, cell.run["status"] in WORKS
    if was_good == is_good:
        return None
    old, new = _transformers(before.runs), _transformers(cell.runs)
    environment = f"transformers {old} -> {new}" if old and new and old != new else None
    return Transition(
        row,
        "fix" if is_good else "regression",
        before_build,
        build,
        before.run["status"],
        cell.run["status"],
        cell.run["id"],
        error_line(cell.run),
        environment,
        before.run["id"],
    )


_NONE: frozenset = frozenset()


def _key_change(row: RowKey, before_build, before: set, build, after: set) -> Optional[KeyChange]:
    if before == after:
        return None
    appeared, disappeared = sorted(after - before), sorted(before - after)
    if not appeared and not disappeared:
        return None
    return KeyChange(row, build, before_build, appeared, disappeared)


def _state(cells: list[Cell]) -> str:
    """A group of cells on one build: works, fails, flaky (none fails outright, some runs failed) or partly."""
    states = {cell.state for cell in cells}
    if states == {"works"}:
        return "works"
    if states == {"fails"}:
        return "fails"
    return "flaky" if "fails" not in states else "partly"


def verdicts(matrix: Matrix, strip: int, keys: Optional[dict[int, set[tuple[str, str]]]] = None) -> list[Verdict]:
    """Per case x fullgraph mode: the answer on the newest build, one history over every build of
    every variant (cpu, cu126, ...) in version order, so that "since which torch does this compile"
    has one answer; each build names its variant. With the hidden errors its runs there recorded
    (an error torch swallowed is news even when the row works)."""
    groups: dict[tuple[str, int], list[RowKey]] = {}
    for row in matrix.rows:
        groups.setdefault((row.case, row.fullgraph), []).append(row)
    found = []
    for (case, fullgraph), members in sorted(groups.items(), key=lambda g: (g[0][0], -g[0][1])):
        line = matrix.builds
        columns = [matrix.column(row) for row in members]
        history = []  # (build, cells), oldest first
        for build in line:
            build_id = build["id"]
            present = [c for column in columns if (c := column.get(build_id))]
            if present:
                history.append((build, present))
        if not history:
            continue
        newest, present = history[-1]
        state = _state(present)
        since_index = len(history) - 1
        while since_index > 0 and _state(history[since_index - 1][1]) == state:
            since_index -= 1
        errors = Counter(text for c in present if (text := error_line(c.run)) and c.run["status"] not in WORKS)
        hidden = Counter(
            key
            for c in present
            for run in c.runs
            for table, key in (keys or {}).get(run["id"], set())
            if table == "hidden_errors"
        )
        found.append(
            Verdict(
                case=case,
                fullgraph=fullgraph,
                variant=None,
                state=state,
                working=sum(c.state == "works" for c in present),
                total=len(present),
                since=history[since_index][0],
                newest=newest,
                episode=_newest_episode(matrix, members, line),
                strip=[
                    (b, _state(cells), f"{sum(c.state == 'works' for c in cells)}/{len(cells)} work")
                    for b, cells in reversed(history[-strip:])
                ],
                errors=[text for text, _ in errors.most_common()],
                runs_failed=sum(len(c.runs) - c.working for c in present),
                runs=sum(len(c.runs) for c in present),
                hidden=[key for key, _ in sorted(hidden.items(), key=lambda item: (-item[1], item[0]))],
                flips=max(matrix.flips.get(row, 0) for row in members),
            )
        )
    return found


def episodes(matrix: Matrix, row: RowKey, line: list[dict[str, Any]]) -> list[Episode]:
    """The stretches of builds (of ``line``, one variant's builds in order) on which ``row`` failed."""
    found: list[Episode] = []
    previous: Optional[dict[str, Any]] = None
    column = matrix.column(row)
    for build in line:
        cell = column.get(build["id"])
        if cell is None:
            continue
        bad = cell.run["status"] not in WORKS
        current = found[-1] if found and found[-1].fixed_in is None and found[-1].last_bad is previous else None
        if bad and current:
            current.last_bad = build
        elif bad:
            found.append(Episode(row, build, previous, build, None, error_line(cell.run)))
        elif current:
            current.fixed_in = build
        previous = build
    return found


def _newest_episode(matrix: Matrix, members: list[RowKey], line: list[dict[str, Any]]) -> Optional[Episode]:
    """The newest regression among ``members`` (a row that worked, then failed), with how many rows
    failed over the same stretch; failing that, a row that never worked."""
    position = {b["id"]: i for i, b in enumerate(line)}
    every = [e for row in members for e in episodes(matrix, row, line)]
    if not every:
        return None
    best = max(every, key=lambda e: (e.last_good is not None, position[e.first_bad["id"]], e.fixed_in is None))
    best.rows = sum(1 for e in every if e.first_bad is best.first_bad and e.fixed_in is best.fixed_in)
    return best


def archive(items: list, size: int) -> list[list]:
    """``items`` (oldest first) in whole chunks of ``size``, counted from the oldest: a chunk, once
    whole, holds the same items however many are added after it. The newest ``len(items) % size``
    items are in no chunk."""
    return [items[start : start + size] for start in range(0, len(items) - size + 1, size)] if size > 0 else []
