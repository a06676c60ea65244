"""The status vocabulary and the finding kinds, defined once.

Every run gets exactly one status. The probe decides the compile statuses, the
orchestrator the ones a dead or hung probe leaves (crash, timeout). The CLI's text,
``diag statuses``, the report's legend and its CSS are all generated from ``STATUSES``.

Standard library only: the probe imports it inside bare torch environments.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

# errno values that say the machine failed the run (a full disk or temp folder, a read-only mount,
# no file handles left), not torch: such a run is a tool error, never a compile finding or a status.
ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EMFILE, errno.ENFILE}


@dataclass(frozen=True)
class Status:
    name: str
    meaning: str
    severity: int  # 0 works; higher is worse for the user
    colour: str  # the report's badge background
    works: bool  # the row compiles and runs correctly (graph breaks allowed): the gate's "good"


STATUSES: tuple[Status, ...] = (
    Status("pass", "compiled; no graph break (fullgraph held); outputs equal eager", 0, "#1f883d", True),
    Status(
        "graph_break",
        "compiled with at least one graph break (fullgraph=False); outputs equal eager",
        1,
        "#6a9a1f",
        True,
    ),
    Status(
        "eager_fallback", "the call returned, but dynamo compiled no graph: the frames ran eagerly", 2, "#bf8700", False
    ),
    Status(
        "fullgraph_error",
        "fullgraph=True and dynamo raised while tracing (Unsupported, UserError, ...)",
        3,
        "#cf222e",
        False,
    ),
    Status("compile_error", "any other exception while compiling (backend, lowering, codegen)", 3, "#a40e26", False),
    Status("mismatch", "compiled tokens differ from eager, or logits beyond tolerance", 4, "#8250df", False),
    Status(
        "eager_error",
        "the case failed in eager mode, or its eager tokens differ from generate: "
        "a broken case, not a compiler finding",
        2,
        "#57606a",
        False,
    ),
    Status(
        "crash",
        "the probe died by a signal (or exited without a verdict); signal and stderr tail recorded",
        5,
        "#1d1d1f",
        False,
    ),
    Status("timeout", "the probe exceeded its time limit", 5, "#6e7781", False),
)
BY_NAME = {status.name: status for status in STATUSES}
WORKS = frozenset(status.name for status in STATUSES if status.works)

PASS, GRAPH_BREAK, EAGER_FALLBACK, FULLGRAPH_ERROR, COMPILE_ERROR, MISMATCH, EAGER_ERROR, CRASH, TIMEOUT = (
    status.name for status in STATUSES
)
# What says nothing of the compiler: the case itself is broken (it fails in eager, or its eager tokens
# are not generate's). Such a run never decides a cell another run decides, never makes a regression
# or a fix, and a row whose runs on a build are all such is not compared there (docs/regressions.md).
NOT_A_FINDING = frozenset({EAGER_ERROR})
# After these the run holds no timings; after the compile failures, eager timings only.
NOT_TIMEABLE = frozenset({EAGER_ERROR, CRASH, TIMEOUT})
EAGER_ONLY = frozenset({FULLGRAPH_ERROR, COMPILE_ERROR})
# A run that compiled nothing has no graph-break, recompile or hidden-error counts: "-", not 0.
NEVER_COMPILED = NOT_TIMEABLE
# After these the backend's compiler was never called: dynamo failed, fell back or never ran.
NEVER_LOWERED = frozenset({FULLGRAPH_ERROR, EAGER_FALLBACK, EAGER_ERROR})


@dataclass(frozen=True)
class FindingKind:
    record: str  # the record kind the probe writes (records.py)
    table: str  # the DB table its rows go to
    count_column: str  # the runs column that counts it
    label: str  # for people, singular


FINDING_KINDS: tuple[FindingKind, ...] = (
    FindingKind("graph_break", "graph_breaks", "graph_break_count", "graph break"),
    FindingKind("recompile", "recompiles", "recompile_count", "recompile"),
    FindingKind("hidden_error", "hidden_errors", "hidden_error_count", "hidden error"),
)
FINDING_TABLES = tuple(kind.table for kind in FINDING_KINDS)


def finding_total(rows: Sequence[Mapping[str, Any]]) -> int:
    """How many times the findings in ``rows`` occurred: each row counts ``count`` times (1 when absent).

    The one count of graph breaks, recompiles and hidden errors: the probe's status decision and the
    stored count both use it on the same rows.
    """
    return sum(row.get("count") or 1 for row in rows)
