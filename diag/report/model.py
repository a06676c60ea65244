"""What the report shows: the matrix of cells, its transitions, key changes and verdicts (made from
the stored runs by history.py).

A cell is every run of one row on one build. Its status is its deciding run's
(``rows.deciding_run``: the worst, as ``diag check`` reads it too): a failure among repeats is
never outvoted, and the same runs give the same verdicts in whatever order they were stored. A cell
whose runs partly failed is flaky, and says how many failed. A broken case (``eager_error``) is not a
compiler finding: it decides a cell only where no other run does, and a cell of broken runs alone is
``broken``, neither working nor failing; it makes no transition, key change or episode, and the
row's next build is compared with its last build that was measured. Transitions and key changes are
between consecutive builds of one variant (a CUDA nightly is not the next build after a CPU one),
again as ``check`` pairs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Optional

from diag import row as rows
from diag.contract import BY_NAME, WORKS, statuses
from diag.row import deciding_run
from diag.store.typed import StoredRun, TorchBuildRow

RowKey = rows.Row


def row_label(row: RowKey) -> str:
    """The row beside its case column: where the case came from (when not built in) and its config."""
    return rows.describe(row._asdict())


def error_line(run: StoredRun) -> Optional[str]:
    """A run's error: its type and the first line of its message."""
    if not run.get("error_type"):
        return None
    first = (run.get("error_message") or "").strip().splitlines()[:1]
    return str(run["error_type"]) + (f": {first[0]}" if first else "")


def how_it_works(run: StoredRun) -> str:
    """What a working run paid to work: its graph breaks, and its recompiles during decode (at every
    decode step, which ``check`` calls a regression of its own, or at some); empty where nothing."""
    said = []
    breaks = run.get("graph_break_count")
    if breaks:
        said.append(f"{breaks} graph break{'s' if breaks != 1 else ''}")
    steps = max(0, (run.get("new_tokens") or 1) - 1)
    recompiled = run.get("decode_recompile_steps")
    if recompiled and steps and recompiled >= steps:
        said.append("recompiles at every decode step")
    elif recompiled:
        said.append(f"recompiles on {recompiled} of {steps} decode steps")
    elif run.get("recompile_count"):
        count = run.get("recompile_count")
        said.append(f"{count} recompile{'s' if count != 1 else ''} before decoding")
    return "; ".join(said)


class Cell:
    """Every run of one row on one build. A plain class with slots: a history has one per run."""

    __slots__ = ("runs", "changed", "run", "working", "measured", "state")

    def __init__(self, runs: list[StoredRun]) -> None:
        self.runs = runs  # every run of the row on the build, oldest first
        self.changed = False  # the status differs from the previous build of the variant with a run in this row
        if len(runs) == 1:  # most cells: decided without a sort or a count
            self.run = runs[0]  # the deciding run: the cell's status, as ``diag check`` reads it
            status = self.run["status"]
            self.measured = int(status not in statuses.NOT_A_FINDING)
            self.working = int(status in WORKS)
            self.state = "broken" if not self.measured else ("works" if self.working else "fails")
            return
        self.run = deciding_run(runs)
        # the runs that say something of the compiler, and of those the runs that worked
        self.measured = sum(1 for r in runs if r["status"] not in statuses.NOT_A_FINDING)
        self.working = sum(1 for r in runs if r["status"] in WORKS)
        # works (every measured run), flaky (some failed, some worked), fails (none worked), broken (none measured)
        if not self.measured:
            self.state = "broken"
        else:
            self.state = "works" if self.working == self.measured else ("fails" if self.working == 0 else "flaky")

    @property
    def broken(self) -> bool:
        """No run of the cell says anything of the compiler."""
        return self.state == "broken"

    @property
    def worst(self) -> str:
        """The worst status of the cell's measured runs (of every run, where none was measured)."""
        measured = [r["status"] or "" for r in self.runs if r["status"] not in statuses.NOT_A_FINDING]
        every = measured or [r["status"] or "" for r in self.runs]
        return max(every, key=lambda s: BY_NAME[s].severity if s in BY_NAME else 9)

    @property
    def mixed(self) -> bool:
        return len({r["status"] for r in self.runs}) > 1

    @property
    def tally(self) -> str:
        """``3/5 work``; empty for a single run."""
        if len(self.runs) < 2:
            return ""
        broken = len(self.runs) - self.measured
        work = f"{self.working}/{self.measured} work" if self.measured else ""
        return ", ".join(part for part in (work, f"{broken} broken" if broken else "") if part)

    @property
    def split(self) -> list[tuple[str, StoredRun]]:
        """Where the cell's runs differ in something the row does not name (the Python minor, the
        transformers version), each side's label and deciding run: ``[("Python 3.10", run), ...]``.
        Empty when every run shares them."""
        if len(self.runs) < 2:
            return []
        sides: dict[tuple[str, str], list[StoredRun]] = {}
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


def identity_of(run: StoredRun) -> tuple[str, str]:
    """What a run's outcome may depend on beyond its row and build: its Python minor version and
    its transformers version."""
    python = ".".join((run.get("python") or "").split(".")[:2])
    return python, run.get("transformers_version") or ""


@dataclass
class Transition:
    row: RowKey
    kind: str  # regression | fix
    last_before: TorchBuildRow  # build
    first_after: TorchBuildRow  # build
    status_before: str
    status_after: str
    run_id: int
    error: Optional[str] = None  # the first bad run's error: type and the first line of its message
    environment: Optional[str] = None  # what else changed: "transformers 4.56.2 -> 4.57.0"
    before_run_id: Optional[int] = None  # the run that decided the cell before the change

    @property
    def commit_range(self) -> Optional[str]:
        return commit_range(self.last_before, self.first_after)


def commit_range(before: Optional[TorchBuildRow], after: Optional[TorchBuildRow]) -> Optional[str]:
    """``a...b`` for GitHub's compare view, when both builds name their commit."""
    if not before or not after:
        return None
    a, b = before.get("git_version"), after.get("git_version")
    return f"{a}...{b}" if a and b else None


@dataclass
class KeyChange:
    row: RowKey
    build: TorchBuildRow
    previous: TorchBuildRow
    appeared: list[tuple[str, str]] = field(default_factory=list)
    disappeared: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Episode:
    """A stretch of consecutive builds on which a row failed."""

    row: RowKey
    first_bad: TorchBuildRow
    last_good: Optional[TorchBuildRow]  # the build before it (None: failing from the row's first build)
    last_bad: TorchBuildRow
    fixed_in: Optional[TorchBuildRow]  # None: still failing on the row's newest build
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
    since: TorchBuildRow  # the oldest build of the current unbroken state
    newest: TorchBuildRow
    episode: Optional[Episode]  # the newest regression of one of its rows (current or fixed), else the
    # failure of a row that never worked
    strip: list[tuple[TorchBuildRow, str, str]]  # newest first: (build, state, "k/m work")
    errors: list[str]  # the newest build's errors, most frequent first (of each cell's deciding run)
    runs_failed: int = 0  # of the newest build's runs in these rows, how many failed
    runs: int = 0
    hidden: list[str] = field(default_factory=list)  # hidden-error keys of the newest build's runs, most runs first
    flips: int = 0  # the most transitions any of its rows had over the history
    how: str = ""  # what its working rows pay on the newest build (how_it_works): breaks, recompiles
    failing: Optional[dict[str, Any]] = None  # the newest build's first failing run: its id and file:line ("at")
    never_worked: bool = False  # every row failed on every build it ran: not a regression

    @property
    def flaky(self) -> bool:
        return self.flips >= FLAKY_FLIPS

    @property
    def mode(self) -> str:
        return "fullgraph" if self.fullgraph else "no-fullgraph"


class Settled(Exception):
    """A cell of a build whose cells a matrix does not hold was asked for (history.py)."""


FLAKY_FLIPS = 4  # transitions of one row (two regressions and two fixes) that make it flaky, not a one-off


@dataclass
class Matrix:
    builds: list[TorchBuildRow]  # oldest first
    rows: list[RowKey]
    by_row: dict[RowKey, dict[int, Cell]]  # per row, its cell on each build id it has runs on
    transitions: list[Transition]  # newest first
    key_changes: list[KeyChange]  # newest first
    verdicts: list[Verdict] = field(default_factory=list)
    flips: dict[RowKey, int] = field(default_factory=dict)  # transitions per row, over every build
    transformers: dict[int, list[str]] = field(default_factory=dict)  # per build id: the versions its runs used
    pythons: dict[int, list[str]] = field(default_factory=dict)  # per build id: its runs' Python minor versions
    cells_json: dict[RowKey, str] = field(default_factory=dict)  # per row, report.json's text of its cells
    sides: dict[int, str] = field(default_factory=dict)  # run pages of both cells of every change: run id -> href
    settled: set[int] = field(default_factory=set)  # builds whose cells this matrix does not hold (history.py)
    state: Optional[dict[str, Any]] = None  # the fold's state kept for the next render (history.Fold.state)

    # Cells are looked up per row, then per build id: a row key is a tuple of a dozen fields, hashed
    # again at every lookup, and a history has hundreds of thousands of lookups. Loops over builds
    # take ``column(row)`` once.
    def column(self, row: RowKey) -> dict[int, Cell]:
        """The row's cells by build id: of every build but the settled ones (``held``)."""
        return self.by_row.get(row, _NO_CELLS)

    def cell(self, row: RowKey, build_id: int) -> Optional[Cell]:
        self.held([build_id])
        return self.by_row.get(row, _NO_CELLS).get(build_id)

    def held(self, build_ids: Iterable[int]) -> None:
        """Settled where the cells of one of ``build_ids`` are not held here."""
        if self.settled:
            asked = set(build_ids)
            if not self.settled.isdisjoint(asked):
                raise Settled(f"the cells of settled builds were asked for: {sorted(self.settled & asked)[:3]}")

    def cells(self) -> Iterator[tuple[RowKey, int, Cell]]:
        """Every cell: (row, build id, cell)."""
        for row, column in self.by_row.items():
            for build_id, cell in column.items():
                yield row, build_id, cell


_NO_CELLS: dict[int, Cell] = {}


def archive(items: list, size: int) -> list[list]:
    """``items`` (oldest first) in whole chunks of ``size``, counted from the oldest: a chunk, once
    whole, holds the same items however many are added after it. The newest ``len(items) % size``
    items are in no chunk."""
    return [items[start : start + size] for start in range(0, len(items) - size + 1, size)] if size > 0 else []
