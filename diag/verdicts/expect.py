"""Count contracts with a ratchet (``diag expect``, ``diag check --expect``). Pure: no I/O.

A contract holds, per row (case and config), the exact counts a build gave: graphs, graph breaks
in all and per GB id (or reason where torch names none), recompiles in all and per guard (what the
guard checked: ``size[1]``, ``item``), hidden errors in all and per key, recompiles on a second
call, and torch's own counters (dynamo's, and inductor's where it ran: pattern-matcher and fusion
counts, FX-graph cache hits and misses, cudagraph captures and skips where present) as
``counter <section>.<name>``. A count absent from a run is 0, so a graph break that goes away is a
change like one that comes.

Checking a build against it fails on any difference, an improvement included: the expected figure is
lowered on purpose, by rewriting the file (the ratchet), not left to drift. Where a count
legitimately differs on one torch version, the difference is kept in that version's section
(``torch`` -> ``"2.14"``), which overrides the row's counts for builds of that version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from diag import row as rows
from diag.signal import counts
from diag.store.typed import StoredRun

FORMAT = 1
# the counts of which fewer is better; of torch's counters (fusions, cache hits, captures) it is not
FEWER_IS_BETTER = ("graphs", "graph_breaks", "recompiles", "hidden_errors", "second_call_recompiles")
FORMAT_KEY = "diag_expect"


class ContractError(ValueError):
    """A contract file that is not one: said in one line, with where."""


def version_key(torch_version: Optional[str]) -> str:
    """A torch version's section name: its major.minor (``2.14.1+cu130`` -> ``2.14``)."""
    match = re.match(r"(\d+)\.(\d+)", torch_version or "")
    return f"{match.group(1)}.{match.group(2)}" if match else (torch_version or "?")


def newest_per_row(runs: list[StoredRun]) -> dict[str, StoredRun]:
    """Each row's newest run of ``runs`` (a build's), by the row's label."""
    found: dict[str, StoredRun] = {}
    for run in sorted(runs, key=lambda r: (r.get("started_at") or "", r["id"])):
        found[rows.label(rows.of(run))] = run
    return dict(sorted(found.items()))


def written(
    runs: list[StoredRun], torch_version: str, existing: Optional[dict[str, Any]] = None, section: bool = False
) -> dict[str, Any]:
    """The contract for ``runs`` (one build's): each row's counts. With ``existing`` and ``section``,
    the rows' counts stay, and what differs on this build is kept in its version's section; without
    ``section``, the counts are replaced (the ratchet) and other versions' sections are kept."""
    contract: dict[str, Any] = {FORMAT_KEY: FORMAT, "rows": {}}
    old_rows = (existing or {}).get("rows") or {}
    for label, run in newest_per_row(runs).items():
        now = counts(run)
        entry = dict(old_rows.get(label) or {})
        if section and "counts" in entry:
            base = entry["counts"]
            differing = {k: now.get(k, 0) for k in sorted({*base, *now}) if now.get(k, 0) != base.get(k, 0)}
            sections = dict(entry.get("torch") or {})
            sections[version_key(torch_version)] = differing
            entry["torch"] = {k: v for k, v in sorted(sections.items()) if v}
        else:
            entry["counts"] = now
            entry["written_on"] = torch_version
        contract["rows"][label] = entry
    for label, entry in old_rows.items():  # rows this build did not run stay as they were
        contract["rows"].setdefault(label, entry)
    contract["rows"] = dict(sorted(contract["rows"].items()))
    return contract


def read(document: Any, where: str) -> dict[str, Any]:
    """A contract as parsed from JSON, checked for its shape; ContractError where it is not one."""
    shaped = isinstance(document, dict) and isinstance(document.get("rows"), dict)
    if not shaped or document.get(FORMAT_KEY) != FORMAT:
        raise ContractError(f"{where} is not a diag contract (write one with diag expect {where})")
    for label, entry in document["rows"].items():
        held = entry.get("counts") if isinstance(entry, dict) else None
        if not isinstance(held, dict) or not all(isinstance(v, int) for v in held.values()):
            raise ContractError(f"{where}: row {label!r} has no counts of whole numbers")
    return document


@dataclass(frozen=True)
class Moved:
    """A count of a row that differs from its contract (``expected`` None: the row is not in it)."""

    row: str
    count: str
    expected: Optional[int]
    actual: Optional[int]

    @property
    def message(self) -> str:
        if self.expected is None:
            return "not in the contract"
        if (self.actual or 0) > self.expected:
            way = "more"
        elif self.count.startswith(FEWER_IS_BETTER):
            way = "fewer: an improvement, taken by rewriting the contract"
        else:  # a counter of torch's: fewer fusions, cache hits or captures is no improvement
            way = "fewer"
        return f"{self.count}: expected {self.expected}, got {self.actual} ({way})"


def expected(entry: Mapping[str, Any], torch_version: Optional[str]) -> dict[str, int]:
    """A row's counts for a build of ``torch_version``: its counts, overridden by the version's section."""
    return {**entry["counts"], **((entry.get("torch") or {}).get(version_key(torch_version)) or {})}


def compared(contract: Mapping[str, Any], runs: list[StoredRun], torch_version: Optional[str]) -> list[Moved]:
    """Every count of ``runs`` (one build's) that differs from ``contract``; a row the contract lacks
    is one difference. Rows of the contract with no run here are not judged (``unchecked``)."""
    moved: list[Moved] = []
    for label, run in newest_per_row(runs).items():
        entry = contract["rows"].get(label)
        if entry is None:
            moved.append(Moved(label, "row", None, None))
            continue
        want, got = expected(entry, torch_version), counts(run)
        moved += [
            Moved(label, name, want.get(name, 0), got.get(name, 0))
            for name in sorted({*want, *got})
            if want.get(name, 0) != got.get(name, 0)
        ]
    return moved


def unchecked(contract: Mapping[str, Any], runs: list[StoredRun]) -> list[str]:
    """The contract's rows with no run in ``runs``: their counts were not checked."""
    ran = set(newest_per_row(runs))
    return [label for label in contract["rows"] if label not in ran]


@dataclass
class Held:
    """A build held to a contract: what moved, the contract's rows it did not run, and the command
    that writes its counts into the contract."""

    path: str
    version: Optional[str]
    moved: list[Moved]
    checked: list[str]  # the rows the build ran
    unchecked: list[str]
    update: str

    def lines(self) -> list[str]:
        """``check``'s text: one line per count that moved, under its row, then what was not checked."""
        said = [f"contract {self.path} on {self.version}:"]
        by_row: dict[str, list[Moved]] = {}
        for item in self.moved:
            by_row.setdefault(item.row, []).append(item)
        for label, moved in by_row.items():
            said.append(f"  COUNT MOVED {label}: " + "; ".join(m.message for m in moved))
        if self.unchecked:
            shown = ", ".join(self.unchecked[:3]) + (", ..." if len(self.unchecked) > 3 else "")
            said.append(f"  not run on this build, so not checked: {len(self.unchecked)} row(s): {shown}")
        if self.moved:
            said.append(
                f"  {len(self.moved)} count(s) moved in {len(by_row)} of {len(self.checked)} row(s); to take them: "
                f"{self.update} --build BUILD (with --section, where they differ on that torch version only)"
            )
        else:
            said.append(f"  every count of {len(self.checked)} row(s) as the contract holds it")
        return said

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.path,
            "build": self.version,
            "checked": self.checked,
            "moved": [{"row": m.row, "count": m.count, "expected": m.expected, "actual": m.actual} for m in self.moved],
            "unchecked": self.unchecked,
            "update": self.update,
        }
