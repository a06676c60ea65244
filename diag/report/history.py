"""The matrix of a history (report/model.py), made by one fold over its builds in version order.

What a build adds (its cells' status changes against each row's previous cell on its variant's
line, or on an older torch's line where its own has none: the transitions and key changes; each
row's failing stretches, each case and fullgraph mode's state, report.json's cells) depends on its
own runs and on a small state the builds before it leave (``Fold``). A render keeps that state as
it stood some builds back from the newest (``Fold.state``, JSON), and the next render, where every
build up to there is as it was (their stamps: store.py), reads the runs of the builds after it
alone and folds them in from the kept state: the same matrix as from scratch, except that it holds
no cells of the builds before (``Matrix.settled``); asking for one raises ``Settled``, and the
render starts again from scratch.
"""

from __future__ import annotations

from collections import Counter
from operator import itemgetter
from typing import Any, Optional

from diag import pages
from diag import row as rows
from diag.build import order as build_order
from diag.contract import WORKS
from diag.report.index_json import cell_json
from diag.report.model import (
    Cell,
    Episode,
    KeyChange,
    Matrix,
    RowKey,
    Settled,
    Transition,
    Verdict,
    error_line,
    how_it_works,
)
from diag.store.typed import StoredRun, TorchBuildRow

__all__ = ["Fold", "Settled", "build_matrix", "ordered"]

_NONE: frozenset = frozenset()
Keys = dict[int, set[tuple[str, str]]]


def ordered(builds: list[TorchBuildRow], used: set[int]) -> list[TorchBuildRow]:
    """The builds with runs (``used``: their ids), oldest first: the matrix's columns."""
    return [b for b in sorted(builds, key=build_order) if b["id"] in used]


def build_matrix(
    builds: list[TorchBuildRow],
    runs: list[StoredRun],
    keys: Keys,
    strip: int = 30,
    start: Optional[dict[str, Any]] = None,
    keep_at: Optional[int] = None,
) -> Matrix:
    """Every run of each row x build, with status changes, transitions, key changes and verdicts.
    ``start``: a kept ``Fold.state``, whose builds come first; ``runs`` (and ``keys``) are then those
    of the builds after them. ``keep_at``: the number of builds after which the fold's state is
    kept, as ``Matrix.state``."""
    by_id = {b["id"]: b for b in builds}
    try:
        fold = Fold(strip, by_id) if start is None else Fold.load(start, strip, by_id)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:  # a state edited by hand
        raise Settled(f"the state kept cannot be taken up: {exc!r}") from exc
    grouped: dict[int, dict[RowKey, list[StoredRun]]] = {}
    seen: dict[int, set[tuple[str, str]]] = {}  # per build id: (transformers, Python) of its runs
    fields = itemgetter(*rows.FIELDS)
    made: dict[tuple, RowKey] = {}  # a row key made once per row, not once per run
    for run in sorted(runs, key=itemgetter("id")):
        try:
            row = made.get(fields(run)) or made.setdefault(fields(run), rows.of(run))
        except KeyError:  # a run without every row column: rows.of reads it as NULL
            row = rows.of(run)
        build_id = run["torch_build_id"]
        grouped.setdefault(build_id, {}).setdefault(row, []).append(run)
        seen.setdefault(build_id, set()).add((run.get("transformers_version") or "", run.get("python") or ""))
    settled = set(fold.folded)
    line = [b for b in sorted(builds, key=build_order) if b["id"] in grouped or b["id"] in settled]
    if [b["id"] for b in line[: len(fold.folded)]] != fold.folded:
        raise Settled("a build with runs comes before the builds of the state taken up")
    every = sorted(fold.rows | {row for cells in grouped.values() for row in cells}, key=rows.sort_key)
    rank = {row: index for index, row in enumerate(every)}
    by_row: dict[RowKey, dict[int, Cell]] = {row: {} for row in every}
    # the state as it stood after the first ``keep_at`` builds: the one taken up, where it is there
    state = start if start is not None and keep_at == len(settled) else None
    for index, build in enumerate(line):
        if build["id"] in settled:
            continue
        found = grouped.get(build["id"], {})
        cells = [(row, Cell(found[row])) for row in sorted(found, key=rank.__getitem__)]
        for row, cell in cells:
            by_row[row][build["id"]] = cell
        fold.add(build, cells, keys)
        if keep_at is not None and index + 1 == keep_at:
            state = fold.state(keys)
    matrix = fold.finish(line, every, by_row, keys)
    matrix.settled, matrix.state = settled, state
    for build_id, pairs in seen.items():
        matrix.transformers[build_id] = sorted({version for version, _ in pairs if version})
        matrix.pythons[build_id] = sorted({".".join(p.split(".")[:2]) for _, p in pairs if p})
    return matrix


def _state(cells: list[Cell]) -> str:
    """A group of cells on one build: works, fails, flaky (none fails outright, some runs failed) or partly;
    broken where no cell was measured (the case itself is broken on every config)."""
    states = {cell.state for cell in cells} - {"broken"}
    if not states:
        return "broken"
    if states == {"works"}:
        return "works"
    if states == {"fails"}:
        return "fails"
    return "flaky" if "fails" not in states else "partly"


def _hrefs(cell: Cell) -> dict[int, str]:
    return {run["id"]: pages.run_href(run) for run in cell.runs}


def _newest(present: list[Cell], keys: Keys) -> dict[str, Any]:
    """What a verdict says of a group's newest build: its errors, most frequent first (of each cell's
    deciding run), its runs' hidden-error keys (most runs first), how many runs failed."""
    measured = [c for c in present if not c.broken]
    errors = Counter(text for c in measured if (text := error_line(c.run)) and c.run["status"] not in WORKS)
    hidden = Counter(
        key for c in present for run in c.runs for table, key in keys.get(run["id"], _NONE) if table == "hidden_errors"
    )
    failing = next((c.run for c in measured if c.run["status"] not in WORKS), None)
    working = [c.run for c in measured if c.state == "works"]
    paid = max(
        working, key=lambda r: (r.get("graph_break_count") or 0, r.get("decode_recompile_steps") or 0), default=None
    )
    return {
        "how": how_it_works(paid) if paid is not None else "",
        "failing": {"id": failing["id"], "uid": failing.get("uid"), "at": failing.get("error_location")}
        if failing
        else None,
        "working": sum(c.state == "works" for c in measured),
        "total": len(measured),
        "errors": [text for text, _ in errors.most_common()],
        "runs_failed": sum(c.measured - c.working for c in measured),
        "runs": sum(c.measured for c in measured),
        "hidden": [key for key, _ in sorted(hidden.items(), key=lambda item: (-item[1], item[0]))],
    }


def _never_worked(episodes: list[Episode]) -> bool:
    """A row that failed from its first build and never worked after: one stretch, still failing."""
    return len(episodes) == 1 and episodes[0].last_good is None and episodes[0].fixed_in is None


class Fold:
    """The state the builds folded so far leave for the next one (see the module's docstring)."""

    def __init__(self, strip: int, by_id: dict[int, TorchBuildRow]) -> None:
        self.strip, self.by_id = strip, by_id
        self.folded: list[int] = []  # the ids of the builds folded, oldest first
        self.rows: set[RowKey] = set()
        # per variant and row, its last cell on that variant's line: (build id, Cell or its summary)
        self.carry: dict[tuple[Optional[str], RowKey], tuple[int, Any]] = {}
        self.last: dict[RowKey, int] = {}  # per row, the build of its last cell on any line
        self.episodes: dict[RowKey, list[Episode]] = {}
        # per case and fullgraph mode: the newest states, where the current one began, the newest build
        self.groups: dict[tuple[str, int], dict[str, Any]] = {}
        self.transitions: list[Transition] = []
        self.key_changes: list[KeyChange] = []
        self.json: dict[RowKey, list[str]] = {}  # per row, report.json's text of each cell
        self.sides: dict[tuple[RowKey, int], dict[int, str]] = {}  # run pages of a change's two cells

    def add(self, build: TorchBuildRow, cells: list[tuple[RowKey, Cell]], keys: Keys) -> None:
        """Fold in ``build`` with its ``cells`` (in the rows' order)."""
        build_id, variant = build["id"], build["variant"]
        self.folded.append(build_id)
        present: dict[tuple[str, int], list[Cell]] = {}
        for row, cell in cells:
            self.rows.add(row)
            self.json.setdefault(row, []).append(cell_json(build_id, cell))
            present.setdefault((row.case, row.fullgraph), []).append(cell)
            if cell.broken:  # a broken case says nothing of this build: the next is compared with the last measured
                continue
            previous = self.carry.get((variant, row)) or self._last_on_any_line(row, build)
            if previous is not None:
                self._compare(row, previous, build, cell, keys)
            self.carry[(variant, row)] = (build_id, cell)
            self._episode(row, build, cell)
        for group, members in present.items():
            state = _state(members)
            entry = self.groups.setdefault(group, {"tail": [], "since": None, "newest": None})
            measured = [c for c in members if not c.broken]
            tally = f"{sum(c.state == 'works' for c in measured)}/{len(measured)} work" if measured else "broken case"
            entry["tail"].append((build_id, state, tally))
            if self.strip > 0 and len(entry["tail"]) > self.strip:
                del entry["tail"][0]
            if entry["since"] is None or entry["since"][1] != state:
                entry["since"] = (build_id, state)
            entry["newest"] = (build_id, members)

    def _last_on_any_line(self, row: RowKey, build: TorchBuildRow) -> Optional[tuple[int, Any]]:
        """A row's newest cell on any variant's line, for the first cell of a line that had none: the
        history goes on across a change of variant (2.0.1+cu117, then 2.1.0+cu121, then 2.13.0+cpu) as
        compare relates any two builds. Not the same torch built for another variant (2.13.0+cpu beside
        2.13.0+cu126): two lines side by side are each compared with their own."""
        newest = self.last.get(row)
        if newest is None or _base(self.by_id[newest]) == _base(build):
            return None
        return next((kept for (_, line_row), kept in self.carry.items() if line_row == row and kept[0] == newest), None)

    def _compare(self, row: RowKey, previous: tuple[int, Any], build: TorchBuildRow, cell: Cell, keys: Keys) -> None:
        """The transition and key change between a row's previous cell (on the variant's line, else on
        any) and ``cell``."""
        before_id, before = previous
        live = isinstance(before, Cell)
        was, now = (before.run["status"] if live else before["status"]), cell.run["status"] or ""
        before_run = before.run["id"] if live else before["run"]
        if was != now:
            cell.changed = True
            if (was in WORKS) != (now in WORKS):
                environment = _also_changed(self.by_id[before_id], before, build, cell)
                kind = "fix" if now in WORKS else "regression"
                self.transitions.append(
                    Transition(
                        row, kind, self.by_id[before_id], build, was, now, cell.run["id"], error_line(cell.run),
                        environment, before_run,
                    )
                )  # fmt: skip
                self._sides(row, previous, build["id"], cell)
        had = keys.get(before_run, _NONE) if live else before["keys"]
        has = keys.get(cell.run["id"], _NONE)
        if had != has:
            self.key_changes.append(KeyChange(row, build, self.by_id[before_id], sorted(has - had), sorted(had - has)))
            self._sides(row, previous, build["id"], cell)

    def _sides(self, row: RowKey, previous: tuple[int, Any], build_id: int, cell: Cell) -> None:
        before_id, before = previous
        self.sides[(row, before_id)] = _hrefs(before) if isinstance(before, Cell) else before["hrefs"]
        self.sides[(row, build_id)] = _hrefs(cell)

    def _episode(self, row: RowKey, build: TorchBuildRow, cell: Cell) -> None:
        """The stretch of builds (of every variant, in order) on which ``row`` failed, extended."""
        previous = self.last.get(row)
        found = self.episodes.setdefault(row, [])
        current = found[-1] if found and found[-1].fixed_in is None and found[-1].last_bad["id"] == previous else None
        if cell.run["status"] not in WORKS:
            if current:
                current.last_bad = build
            else:
                before = self.by_id[previous] if previous is not None else None
                found.append(Episode(row, build, before, build, None, error_line(cell.run)))
        elif current:
            current.fixed_in = build
        self.last[row] = build["id"]

    def finish(self, line: list[TorchBuildRow], every: list[RowKey], by_row: dict, keys: Keys) -> Matrix:
        """The matrix over ``line`` (every build folded, oldest first) and ``every`` row, in order."""
        # newest first by the build where the change showed, regressions before fixes: with many rows,
        # the newest regression is at the top however its row is named
        position = {build["id"]: index for index, build in enumerate(line)}
        self.transitions.sort(
            key=lambda t: (-position[t.first_after["id"]], t.kind != "regression", rows.sort_key(t.row))
        )
        self.key_changes.sort(key=lambda c: (-position[c.build["id"]], rows.sort_key(c.row)))
        matrix = Matrix(line, every, by_row, self.transitions, self.key_changes)
        for transition in self.transitions:
            matrix.flips[transition.row] = matrix.flips.get(transition.row, 0) + 1
        matrix.verdicts = self._verdicts(matrix, position, keys)
        matrix.cells_json = {row: ",".join(texts) for row, texts in self.json.items()}
        for change in [(t.row, t.last_before, t.first_after) for t in self.transitions] + [
            (c.row, c.previous, c.build) for c in self.key_changes
        ]:
            for build in change[1:]:
                matrix.sides.update(self.sides.get((change[0], build["id"]), {}))
        return matrix

    def _verdicts(self, matrix: Matrix, position: dict[int, int], keys: Keys) -> list[Verdict]:
        """Per case x fullgraph mode: the answer on the newest build, one history over every build of
        every variant (cpu, cu126, ...) in version order, so that "since which torch does this
        compile" has one answer; each build names its variant. With the hidden errors its runs there
        recorded (an error torch swallowed is news even when the row works)."""
        members: dict[tuple[str, int], list[RowKey]] = {}
        for row in matrix.rows:
            members.setdefault((row.case, row.fullgraph), []).append(row)
        found = []
        for (case, fullgraph), group in sorted(members.items(), key=lambda g: (g[0][0], -g[0][1])):
            entry = self.groups.get((case, fullgraph))
            if entry is None:
                continue
            newest_id, present = entry["newest"]
            newest = present if isinstance(present, dict) else _newest(present, keys)
            every = [e for row in group for e in self.episodes.get(row, [])]
            episode = None
            if every:
                episode = max(
                    every, key=lambda e: (e.last_good is not None, position[e.first_bad["id"]], e.fixed_in is None)
                )
                same = [e for e in every if e.first_bad is episode.first_bad and e.fixed_in is episode.fixed_in]
                episode.rows = len(same)
            found.append(
                Verdict(
                    case=case,
                    fullgraph=fullgraph,
                    variant=None,
                    state=entry["tail"][-1][1],
                    working=newest["working"],
                    total=newest["total"],
                    since=self.by_id[entry["since"][0]],
                    newest=self.by_id[newest_id],
                    episode=episode,
                    strip=[(self.by_id[b], state, tally) for b, state, tally in reversed(entry["tail"])],
                    errors=newest["errors"],
                    runs_failed=newest["runs_failed"],
                    runs=newest["runs"],
                    hidden=newest["hidden"],
                    flips=max(matrix.flips.get(row, 0) for row in group),
                    how=newest.get("how", ""),  # a state kept by an older diag has neither
                    failing=newest.get("failing"),
                    never_worked=all(_never_worked(self.episodes.get(row, [])) for row in group),
                )
            )
        return found

    def state(self, keys: Keys) -> dict[str, Any]:
        """The fold so far, as JSON-able data (``load`` reads it back)."""
        return {
            "folded": list(self.folded),
            "rows": [list(row) for row in sorted(self.rows, key=rows.sort_key)],
            "carry": [[v, list(row), b, _carried(cell, keys)] for (v, row), (b, cell) in self.carry.items()],
            "last": [[list(row), b] for row, b in self.last.items()],
            "episodes": [[list(row), [_episode(e) for e in found]] for row, found in self.episodes.items()],
            "groups": [
                [
                    case,
                    fullgraph,
                    [list(t) for t in entry["tail"]],
                    list(entry["since"]),
                    entry["newest"][0],
                    entry["newest"][1] if isinstance(entry["newest"][1], dict) else _newest(entry["newest"][1], keys),
                ]
                for (case, fullgraph), entry in self.groups.items()
            ],  # fmt: skip
            "transitions": [_transition(t) for t in self.transitions],
            "key_changes": [
                [
                    list(c.row),
                    c.build["id"],
                    c.previous["id"],
                    [list(k) for k in c.appeared],
                    [list(k) for k in c.disappeared],
                ]
                for c in self.key_changes
            ],  # fmt: skip
            "json": [[list(row), ",".join(texts)] for row, texts in self.json.items()],
            "sides": [[list(row), b, hrefs] for (row, b), hrefs in self.sides.items()],
        }

    @classmethod
    def load(cls, state: dict[str, Any], strip: int, by_id: dict[int, TorchBuildRow]) -> Fold:
        """The fold ``state`` kept (``state``); KeyError where a build it names is gone."""
        fold = cls(strip, by_id)
        fold.folded = list(state["folded"])
        for b in fold.folded:
            by_id[b]  # a build the state names must still be there: KeyError otherwise
        fold.rows = {RowKey(*row) for row in state["rows"]}
        for variant, row, b, cell in state["carry"]:
            hrefs = {int(run): href for run, href in cell["hrefs"].items()}
            fold.carry[(variant, RowKey(*row))] = (
                b,
                {**cell, "keys": {tuple(k) for k in cell["keys"]}, "hrefs": hrefs},
            )
        fold.last = {RowKey(*row): b for row, b in state["last"]}

        def build(b: Optional[int]) -> Optional[TorchBuildRow]:
            return None if b is None else by_id[b]

        for row, found in state["episodes"]:
            key = RowKey(*row)
            fold.episodes[key] = [
                Episode(key, by_id[first], build(good), by_id[last], build(fixed), error)
                for first, good, last, fixed, error in found
            ]
        for case, fullgraph, tail, since, newest, summary in state["groups"]:
            fold.groups[(case, fullgraph)] = {"tail": [tuple(t) for t in tail], "since": tuple(since),
                                              "newest": (newest, summary)}  # fmt: skip
        fold.transitions = [
            Transition(RowKey(*row), kind, by_id[before], by_id[after], was, now, run, error, environment, before_run)
            for row, kind, before, after, was, now, run, error, environment, before_run in state["transitions"]
        ]
        fold.key_changes = [
            KeyChange(RowKey(*row), by_id[b], by_id[previous], [tuple(k) for k in appeared],
                      [tuple(k) for k in gone])
            for row, b, previous, appeared, gone in state["key_changes"]
        ]  # fmt: skip
        fold.json = {RowKey(*row): [text] if text else [] for row, text in state["json"]}
        fold.sides = {
            (RowKey(*row), b): {int(run): href for run, href in hrefs.items()} for row, b, hrefs in state["sides"]
        }
        return fold


def _base(build: TorchBuildRow) -> str:
    """A build's torch version without its variant (2.13.0 of 2.13.0+cpu)."""
    return str(build.get("version") or "").split("+")[0]


def _also_changed(before_build: TorchBuildRow, before: Any, build: TorchBuildRow, cell: Cell) -> Optional[str]:
    """What besides torch differs between a transition's two cells: the build variant, Python,
    transformers ("cu117 -> cu121, transformers 4.49.0 -> 5.24.0")."""
    live = isinstance(before, Cell)
    was = {
        "variant": before_build.get("variant"),
        "Python": before.runs[-1].get("python") if live else before.get("python"),
        "transformers": before.runs[-1].get("transformers_version") if live else before.get("transformers"),
    }
    now = {"variant": build.get("variant"), "Python": cell.runs[-1].get("python"),
           "transformers": cell.runs[-1].get("transformers_version")}  # fmt: skip
    changed = [
        f"{'' if name == 'variant' else name + ' '}{was[name]} -> {now[name]}"
        for name in was
        if was[name] and now[name] and was[name] != now[name]
    ]
    return ", ".join(changed) or None


def _carried(cell: Any, keys: Keys) -> dict[str, Any]:
    """A carried cell of the fold's state, as JSON-able data."""
    if not isinstance(cell, Cell):  # as it was loaded
        return {**cell, "keys": sorted(cell["keys"])}
    return {
        "status": cell.run["status"],
        "run": cell.run["id"],
        "transformers": cell.runs[-1].get("transformers_version"),
        "python": cell.runs[-1].get("python"),
        "keys": sorted(keys.get(cell.run["id"], _NONE)),
        "hrefs": _hrefs(cell),
    }


def _episode(e: Episode) -> list[Any]:
    return [e.first_bad["id"], e.last_good and e.last_good["id"], e.last_bad["id"],
            e.fixed_in and e.fixed_in["id"], e.error]  # fmt: skip


def _transition(t: Any) -> list[Any]:
    return [list(t.row), t.kind, t.last_before["id"], t.first_after["id"], t.status_before, t.status_after,
            t.run_id, t.error, t.environment, t.before_run_id]  # fmt: skip
