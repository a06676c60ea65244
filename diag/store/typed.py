"""What the store hands out, as types: a ``TypedDict`` per table, generated from the migrated schema
into diag/store/rows.py (``cog -r diag/store/rows.py``; tests/test_typed_store.py fails where it is
stale) and re-exported here, so that a misspelt or removed column is a type error where it is read.
Here: what a read adds to a row (the build, child rows, decoded JSON). Every type is
``total=False``: a read of some columns is the same type.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from diag.store.rows import (  # the generated types, re-exported: every read is typed from here
    BisectRow,
    BuildStampRow,
    EnvironmentRow,
    FoldedRunRow,
    FrameRow,
    GraphBreakRow,
    HiddenErrorRow,
    MigrationRow,
    RaceRow,
    RecompileRow,
    RunRow,
    StoredRunColumns,
    TimingRow,
    TorchBuildRow,
)

__all__ = [
    "MigrationRow",
    "TorchBuildRow",
    "RunRow",
    "GraphBreakRow",
    "RecompileRow",
    "HiddenErrorRow",
    "TimingRow",
    "FrameRow",
    "FoldedRunRow",
    "RaceRow",
    "BuildStampRow",
    "EnvironmentRow",
    "BisectRow",
    "StoredRunColumns",
    "StoredRun",
    "StoredRace",
    "children",
    "column",
]


class StoredRun(StoredRunColumns, total=False):
    """A run as ``get_run`` and ``full_runs`` read it: its columns, its build's, its child rows."""

    build_version: Optional[str]
    build_git_version: Optional[str]
    build_nightly_date: Optional[str]
    build_variant: Optional[str]
    build_wheel_url: Optional[str]
    build_wheel_origin: Optional[str]
    build_wheel_sha256: Optional[str]
    graph_breaks: list[GraphBreakRow]
    recompiles: list[RecompileRow]
    hidden_errors: list[HiddenErrorRow]
    timings: list[TimingRow]
    frames: list[FrameRow]


class StoredRace(RaceRow, total=False):
    """A race as ``races`` reads it: its columns and its build's version."""

    torch_version: Optional[str]


def children(run: Mapping[str, Any], table: str) -> list[Any]:
    """A stored run's rows of the child table ``table`` (graph_breaks, ...), where the table is named
    at run time (a finding kind's); none where the run was read without them."""
    found = run.get(table)
    return found if isinstance(found, list) else []


def column(row: Mapping[str, Any], name: str) -> Any:
    """The value of the column ``name`` where the column is chosen at run time (a chart's metric, a
    swept field), None where the read did not select it: the one read a type cannot check by name."""
    return row.get(name)
