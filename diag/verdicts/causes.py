"""From rows to causes: ``check``'s regressions grouped by what broke them, each cause with its owner.
No I/O but one read of the installed torch's graph-break registry (``gb_ids``).

A regression's cause is its key, the same on every torch build for the same problem:
the stable key diag already stores (a GB id, a graph-break type, an exception's fingerprint with
numbers, names and paths normalised away), a recompile's guard class (``size``, ``item``: what the
guard checked, indices dropped), or the figure that slowed; a key that fails a fullgraph row (its
status) and adds a break to the same case without fullgraph (a new key) is one cause. Its owner is
where to send it:

- the package that moved between the row's two runs, where exactly one did (torch's build, or
  transformers' version): a break that appears in transformers' model code the night torch moved
  is torch's to fix, and the night transformers moved, transformers';
- where none or several moved, the package whose frame the cause happened in (diag's stored
  location: a file under torch/, transformers/, another installed package), and the case's own code
  where the frame is the case's: that one is the user's bug, and is said so.

One torch change that breaks twelve rows is one cause with twelve rows, not twelve alerts.

A cause's key is the same across torch's rewordings of one problem (``canonical``): a GB id where
torch gives one; a graph-break type (torch 2.7-2.8) as the GB id torch's registry gives it later;
a wording older torch used before it named the break (``LEGACY``) as that GB id; else the
exception's type and its first line with torch's framing (``Graph break:``, ``the frame fell back
to eager:``), numbers, names, paths, constants' reprs and a guard's relation normalised away. The same user-code
problem keeps its cause, and its issue, from torch 2.1 to today (tests/test_causes.py holds it
over the version fixtures).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from diag import row as rows
from diag.contract import FINDING_KINDS, graph_break_id, normalise
from diag.store.typed import StoredRun, children
from diag.verdicts.regress import Regression, RowComparison

CASE_CODE = "the case's own code"
UNKNOWN = "unknown"
TRACKERS = {"torch": "pytorch/pytorch", "transformers": "huggingface/transformers", "depyf": "thuml/depyf"}
_INSTALLED = re.compile(r"(?:site|dist)-packages/([A-Za-z_][\w]*)")
# a new key's regression names its finding kind by its label (check's "new hidden error key ...")
_TABLE_OF = {kind.label: kind.table for kind in FINDING_KINDS}
_NEW_KEY = re.compile(rf"^new ({'|'.join(map(re.escape, _TABLE_OF))}) key (\S+)")


# Wordings torch used before it named a break, with the GB id it gave the same break later: each
# seen in the version fixtures, on the same user line as the later id. The graph-break types here
# are those the registry maps too, so that a machine without torch (the nightly's publish job)
# keys them alike.
LEGACY = {
    "Dynamic slicing on data-dependent value is not supported": "GB0038",
    "Dynamic slicing with Tensor arguments": "GB0038",
}
# How torch framed a message around the break itself, by version (2.2's "Graph break: ...", a frame
# given up on as "the frame fell back to eager: Unsupported: ...")
_FRAMING = re.compile(r"^(?:Graph break:\s*|the frame fell back to eager:\s*|Unsupported:\s*)+")
# a variable's repr that torch changed between versions: ConstantVariable(str) -> ConstantVariable()
_REPR = re.compile(r"\b(ConstantVariable|TensorVariable|SymNodeVariable|ListVariable|TupleVariable)\([^()]*\)")
# a guard's relation, which torch states one way or its negation by version: Ne(u1, u3) in 2.10-2.12,
# Eq(u1, u3) in 2.13 for the same data-dependent slice
_RELATION = re.compile(r"\b(?:Eq|Ne|Lt|Le|Gt|Ge)\(")


@functools.lru_cache(maxsize=1)
def gb_ids() -> dict[str, str]:
    """torch's graph-break types by their GB id, from the registry of the torch installed beside diag
    (torch >= 2.8), found without importing torch; empty where there is none."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):  # the orchestrator needs no torch: without one, no registry
        return {}
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "_dynamo" / "graph_break_registry.json"
        try:
            registry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        return {  # newest id first, so that a type torch gave two ids keeps its first
            entry["Gb_type"]: gb
            for gb, entries in sorted(registry.items(), reverse=True)
            for entry in entries
            if isinstance(entry, dict) and entry.get("Gb_type")
        }
    return {}


def canonical(key: str, text: str) -> str:
    """The cause key of a stored ``key`` whose message's first line is ``text``: one key per problem
    across torch's wordings (see the module's doc)."""
    if re.fullmatch(r"GB\d{4}", key):
        return key
    first = _FRAMING.sub("", _first_line(text)).strip()
    if key.startswith("gb_type:"):
        first = key[len("gb_type:") :]
    if found := graph_break_id(first) or gb_ids().get(first):
        return found
    for legacy, gb in LEGACY.items():
        if first.startswith(legacy):
            return gb
    if not first:
        return key
    exc_type = key.split(":", 1)[0] if ":" in key else "Error"
    said = normalise(_RELATION.sub("Rel(", _REPR.sub(r"\1", first)))
    digest = hashlib.sha1(said.encode("utf-8", "replace")).hexdigest()[:12]
    return f"{exc_type}:{digest}"


@dataclass
class Cause:
    """What broke one or more rows: its key, its owner, and every regression it explains (``kind``:
    the first's kind; ``kinds``: every kind it took)."""

    kind: str
    key: str
    owner: str
    where: Optional[str] = None  # a file:line it happened at, as stored
    text: str = ""  # what the key stands for, in torch's words (its first line)
    regressions: list[Regression] = field(default_factory=list)
    # row label: the row's last good and first bad run, as the comparison that found it holds them
    sides: dict[str, tuple[StoredRun, StoredRun]] = field(default_factory=dict)
    # beside torch and transformers, each package that moved between a row's two runs: "depyf 0.18 -> 0.19"
    moved: dict[str, str] = field(default_factory=dict)
    # the same, as versions (None where it was not installed): what a bisect of the package moves between
    moved_versions: dict[str, tuple[Optional[str], Optional[str]]] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """Stable across nights and machines: the same key and owner give the same id."""
        return hashlib.sha1(f"{self.key}\x1f{self.owner}".encode()).hexdigest()[:16]

    @property
    def tracker(self) -> Optional[str]:
        """Where an issue for it goes: the owner's GitHub repository; None for the case's own code."""
        return TRACKERS.get(self.owner)

    @property
    def kinds(self) -> list[str]:
        return list(dict.fromkeys("new key" if r.kind == "new_key" else r.kind for r in self.regressions))

    @property
    def rows(self) -> list[rows.Row]:
        return list(dict.fromkeys(r.row for r in self.regressions))

    def hit(self) -> str:
        """``12 rows: 3 cases, 2 configs, 2 sizes`` (sizes where they differ)."""
        hit = self.rows
        cases = {row.case for row in hit}
        configs = {rows.describe(row._asdict(), sizes=()) for row in hit}  # a config's sizes are its points
        sizes = {tuple(getattr(row, name) for name in rows.SIZES) for row in hit}

        def many(count: int, what: str) -> str:
            return f"{count} {what}{'s' if count != 1 else ''}"

        said = [many(len(cases), "case"), many(len(configs), "config")]
        said += [many(len(sizes), "size")] if len(sizes) > 1 else []
        return f"{many(len(hit), 'row')}: {', '.join(said)}"

    @property
    def headline(self) -> str:
        owner = f"{CASE_CODE}, the user's bug" if self.owner == CASE_CODE else self.owner
        return f"{self.key} ({owner}; {', '.join(self.kinds)})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kinds": self.kinds,
            "key": self.key,
            "owner": self.owner,
            "tracker": self.tracker,
            "where": self.where,
            "text": self.text,
            "moved_beside": list(self.moved.values()),
            "rows": [rows.label(row) for row in self.rows],
            "regressions": [{"row": rows.label(r.row), "kind": r.kind, "message": r.message} for r in self.regressions],
        }


def package_of(location: Optional[str], case_path: Optional[str] = None) -> Optional[str]:
    """The package a stored ``file:line`` lies in: an installed package's import name, ``torch`` for
    torch's own tree, the case's own code for its file; None where it cannot be told."""
    if not location:
        return None
    path = location.replace("\\", "/")
    if match := _INSTALLED.search(path):
        return match.group(1)
    for package in ("torch", "transformers"):
        if path.startswith(f"{package}/") or f"/{package}/" in path:
            return package
    file = path.rsplit(":", 1)[0]
    if case_path and file.rsplit("/", 1)[-1] == case_path.replace("\\", "/").rsplit("/", 1)[-1]:
        return CASE_CODE
    return CASE_CODE if "/diag/cases/" in path or file.endswith(".py") else None


# distributions that come with torch's own wheel (its pinned triton, CUDA's libraries): they move when
# torch does, and are torch's
WITH_TORCH = re.compile(r"^(torch|triton|pytorch-triton(-\w+)?|nvidia-.*)$")


def moved(before: StoredRun, after: StoredRun, held: Optional[Mapping[str, Mapping[str, Any]]] = None) -> list[str]:
    """The packages that moved between two runs of a row: torch (its build), transformers, and with
    the runs' environments (``held``, by digest) any other installed distribution whose version
    changed, came or went (torch's companions counted as torch)."""
    found = []
    if (before.get("build_version"), before.get("build_git_version")) != (
        after.get("build_version"),
        after.get("build_git_version"),
    ):
        found.append("torch")
    if before.get("transformers_version") != after.get("transformers_version"):
        found.append("transformers")
    return found + [name for name in moved_versions(before, after, held) if name not in found]


def moved_versions(
    before: StoredRun, after: StoredRun, held: Optional[Mapping[str, Mapping[str, Any]]]
) -> dict[str, tuple[Optional[str], Optional[str]]]:
    """Per distribution beside torch and transformers whose version differs between the two runs'
    environments: (before, after), None where it was not installed; empty where either run has none."""
    sides = [(held or {}).get(run.get("environment") or "") for run in (before, after)]
    if sides[0] is None or sides[1] is None:
        return {}
    found = package_differences(sides[0]["packages"], sides[1]["packages"])
    return {name: versions for name, versions in found.items() if name != "transformers" and not WITH_TORCH.match(name)}


def package_differences(
    old: Mapping[str, str], new: Mapping[str, str]
) -> dict[str, tuple[Optional[str], Optional[str]]]:
    """Per distribution whose version differs between two environments' packages: (old, new), None
    where it was not installed."""
    return {
        name: (old.get(name), new.get(name)) for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)
    }


def _guard_class(prop: str) -> str:
    """``size[1]`` -> ``size``: what a guard checked, without the index it checked it at."""
    return re.sub(r"\[[^\]]*\]|\d+", "", prop).strip() or prop


def _first_line(text: Optional[str]) -> str:
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")[:120]


def _text(regression: Regression, comparison: RowComparison) -> str:
    """What a cause's key stands for: the error's first line, the finding's type or reason."""
    after = comparison.after
    if after is None:
        return ""
    if regression.kind == "status" and after.get("error_type"):
        return f"{after['error_type']}: {_first_line(after.get('error_message'))}"
    if regression.kind == "new_key" and (match := _NEW_KEY.match(regression.message)):
        return comparison.key_text(_TABLE_OF[match.group(1)], match.group(2))
    return ""


def _key_and_where(regression: Regression, after: StoredRun) -> tuple[str, Optional[str]]:
    if regression.kind == "status":
        key = after.get("error_key") or after.get("error_type") or after.get("status") or "?"
        return canonical(key, after.get("error_message") or ""), after.get("error_location")
    if regression.kind == "new_key" and (match := _NEW_KEY.match(regression.message)):
        table, key = _TABLE_OF[match.group(1)], match.group(2)
        item: dict[str, Any] = next((i for i in children(after, table) if i.get("key") == key), {})
        if table == "recompiles" and item.get("guard_property"):
            return f"recompile guard {_guard_class(item['guard_property'])}", item.get("location")
        said = item.get("gb_type") or item.get("reason") or item.get("message") or ""
        return canonical(key, said), item.get("location")
    if regression.kind == "slowdown" and regression.change is not None:
        return regression.change.metric, None
    if regression.kind == "attention_kernel":
        return regression.message, None
    return regression.kind, None


def of(regressions: list[Regression], held: Optional[Mapping[str, Mapping[str, Any]]] = None) -> list[Cause]:
    """The causes of ``regressions`` (check's, each with the comparison that found it), most rows first;
    ``held``: the runs' environments by digest, to name any package that moved."""
    found: dict[tuple[str, str], Cause] = {}
    for regression in regressions:
        comparison = regression.found_in
        if comparison is None or comparison.before is None or comparison.after is None:
            continue
        before, after = comparison.before, comparison.after
        key, where = _key_and_where(regression, after)
        shifted = moved(before, after, held)
        framed = package_of(where, after.get("case_source"))
        if len(shifted) == 1:
            owner = shifted[0]
        elif framed is not None and (not shifted or framed in shifted):
            owner = framed
        else:
            owner = shifted[0] if shifted else UNKNOWN
        kind = "new key" if regression.kind == "new_key" else regression.kind
        cause = found.setdefault((key, owner), Cause(kind, key, owner, where, _text(regression, comparison)))
        cause.regressions.append(regression)
        for name, (old, new) in moved_versions(before, after, held).items():
            cause.moved.setdefault(name, f"{name} {old or 'absent'} -> {new or 'absent'}")
            cause.moved_versions.setdefault(name, (old, new))
        cause.sides.setdefault(rows.label(regression.row), (before, after))
    return sorted(found.values(), key=lambda c: (-len(c.rows), c.key, c.owner))
