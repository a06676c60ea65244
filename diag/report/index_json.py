"""report.json: the machine-readable index of the site. The builds, the verdicts, every row with
its cells (each cell's deciding run and every run, with the split where its runs differ in Python
or transformers) and the transitions."""

from __future__ import annotations

import functools
import json
from typing import Any

from diag.report.model import Matrix, row_label
from diag.store import typed

_dumps = functools.partial(json.dumps, separators=(",", ":"), default=str)


def report_json(matrix: Matrix) -> str:
    """report.json. The cells are written as JSON text, one string each (``cell_json``), as the
    matrix is made (history.py): a history has one per row and build, and a dict built for each was
    most of the file's cost. The text is what ``json.dumps`` of those dicts gives
    (tests/test_report_json.py)."""
    index = _index(matrix)
    rows = []
    for row in matrix.rows:
        rows.append(
            '{"row":'
            + _dumps(row._asdict())
            + ',"label":'
            + _dumps(f"{row.case} {row_label(row)}")
            + ',"cells":{'
            + matrix.cells_json.get(row, "")
            + "}}"
        )
    return (
        f'{{"builds":{_dumps(index["builds"])},"verdicts":{_dumps(index["verdicts"])},'
        f'"rows":[{",".join(rows)}],"transitions":{_dumps(index["transitions"])}}}'
    )


_word = functools.lru_cache(maxsize=256)(_dumps)  # a status: a small vocabulary, quoted once


def cell_json(build_id: int, cell: Any) -> str:
    """A cell of report.json's row, as its text: ``"<build id>":{...}``."""
    run = cell.run
    if len(cell.runs) == 1:
        status = _word(run["status"])
        return f'"{build_id}":{{"run":{run["id"]},"status":{status},"runs":[[{run["id"]},{status}]]}}'
    return f'"{build_id}":' + _dumps(_cell(cell))


def _cell(cell: Any) -> dict[str, Any]:
    return {
        "run": cell.run["id"],
        "status": cell.run["status"],
        "runs": [[r["id"], r["status"]] for r in cell.runs],
        **({"split": [[label, r["id"], r["status"]] for label, r in split]} if (split := cell.split) else {}),
    }


def _index(matrix: Matrix) -> dict[str, Any]:
    """report.json but its rows (``report_json``)."""
    return {
        "builds": [
            {k: typed.column(b, k) for k in ("id", "version", "git_version", "nightly_date", "variant")}
            for b in matrix.builds
        ],
        "verdicts": [
            {
                "case": v.case,
                "fullgraph": v.fullgraph,
                "variant": v.variant,
                "state": v.state,
                "working": v.working,
                "total": v.total,
                "since": v.since["version"],
                "newest": v.newest["version"],
                "errors": v.errors,
                "runs_failed": v.runs_failed,
                "flips": v.flips,
                "runs": v.runs,
                "first_bad": v.episode.first_bad["version"] if v.episode and not v.never_worked else None,
                "fixed_in": v.episode.fixed_in["version"] if v.episode and v.episode.fixed_in else None,
                "never_worked": v.never_worked,
                "how": v.how or None,
                # by uid, as a run is named across DBs (its id depends on the order runs were stored in)
                "failing_run": {"uid": v.failing.get("uid"), "at": v.failing.get("at")} if v.failing else None,
            }
            for v in matrix.verdicts
        ],
        "transitions": [
            {
                "row": t.row._asdict(),
                "kind": t.kind,
                "last_before": t.last_before["version"],
                "first_after": t.first_after["version"],
                "run": t.run_id,
                "error": t.error,
                "commits": t.commit_range,
                "environment": t.environment,
            }
            for t in matrix.transitions
        ],
    }
