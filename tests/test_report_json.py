"""report.json is written as text, a string per cell: the text must be what ``json.dumps`` gives of
the same data, for cells of one run and of several (with splits by Python and transformers), and
for stored strings a hand-written encoder would get wrong (quotes, backslashes, control and
non-ASCII characters, bidirectional overrides)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from diag import store
from diag.report import history, model, report_json
from diag.report.model import row_label

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import synthetic  # after sys.path names bench/

ODD = 'cr"ash\\ \x07 \u202e é \u2028'


def _expected(matrix: model.Matrix) -> str:
    """report.json built the plain way: a dict per cell, then json.dumps of it all."""
    position = {b["id"]: index for index, b in enumerate(matrix.builds)}
    text = json.dumps(
        {
            "builds": [
                {k: b[k] for k in ("id", "version", "git_version", "nightly_date", "variant")} for b in matrix.builds
            ],
            "verdicts": "VERDICTS",
            "rows": [
                {
                    "row": row._asdict(),
                    "label": f"{row.case} {row_label(row)}",
                    "cells": {
                        str(build_id): {
                            "run": cell.run["id"],
                            "status": cell.run["status"],
                            "runs": [[r["id"], r["status"]] for r in cell.runs],
                            **(
                                {"split": [[label, r["id"], r["status"]] for label, r in cell.split]}
                                if cell.split
                                else {}
                            ),
                        }
                        for build_id, cell in sorted(matrix.column(row).items(), key=lambda i: position[i[0]])
                    },
                }
                for row in matrix.rows
            ],
            "transitions": "TRANSITIONS",
        },
        separators=(",", ":"),
        default=str,
    )
    return text


def _without_verdicts_and_transitions(text: str) -> dict:
    found = json.loads(text)
    found["verdicts"], found["transitions"] = "VERDICTS", "TRANSITIONS"
    return found


def test_report_json_is_json_dumps_of_the_same_cells(tmp_path):
    db = store.open_db(tmp_path / "history.db")
    store.save_runs(db, synthetic.story())
    matrix = history.build_matrix(store.builds(db), store.report_runs(db), store.finding_keys(db))
    single = next(cell.run["id"] for _, _, cell in matrix.cells() if len(cell.runs) == 1)
    repeat = next(cell.runs[-1]["id"] for _, _, cell in matrix.cells() if len(cell.runs) > 1)
    # an odd status on a cell of one run, and on a repeat of a cell of several, on another Python
    with db.conn:
        db.conn.execute("UPDATE runs SET status = ? WHERE id IN (?, ?)", [ODD, single, repeat])
        db.conn.execute("UPDATE runs SET python = '3.10.4' WHERE id = ?", [repeat])
    matrix = history.build_matrix(store.builds(db), store.report_runs(db), store.finding_keys(db))
    odd = [cell for _, _, cell in matrix.cells() if any(r["status"] == ODD for r in cell.runs)]
    assert sorted(len(cell.runs) > 1 for cell in odd) == [False, True]
    text = report_json(matrix)
    json.loads(text)  # valid JSON
    expected = _expected(matrix)
    got = _without_verdicts_and_transitions(text)
    assert json.dumps(got, separators=(",", ":"), default=str) == expected
    # byte for byte, the rows as json.dumps writes them (ensure_ascii escapes included)
    start = text.index('"rows":')
    assert (
        text[start : text.index(',"transitions":', start)]
        == expected[expected.index('"rows":') : expected.index(',"transitions":')]
    )
