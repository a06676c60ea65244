"""What a render keeps per build between renders (``inputs.Memo``: the case charts' whole-history
points, the graph breaks its runs recorded): a night derives them for the new build only, and
whatever changed in an older build's runs, or a memo that cannot be read, has them derived again.
Each re-render is compared, byte for byte, with a render from scratch of the same DB."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from conftest import site_files
from test_report_archive import _add_night, _history, _publish

from diag.report import breaks_page, charts, inputs

NIGHTS = 7


@pytest.fixture
def derived(monkeypatch) -> dict[str, set[int]]:
    """The build ids ``charts.build_points`` and ``breaks_page.build_summaries`` are asked for, in a
    history drawn with an overview (three builds in detail, so seven nightlies have a whole-history
    chart), and those ``charts.build_cells`` is asked for (``cells``: the builds drawn in detail)."""
    monkeypatch.setattr(charts, "DETAIL_BUILDS", 3)
    asked: dict[str, set[int]] = {"charts": set(), "breaks": set(), "cells": set()}
    points, summaries, cells = charts.build_points, breaks_page.build_summaries, charts.build_cells

    def counted_cells(matrix, case_rows, build_id):
        asked["cells"].add(build_id)
        return cells(matrix, case_rows, build_id)

    def counted_points(matrix, case_rows, build_id):
        asked["charts"].add(build_id)
        return points(matrix, case_rows, build_id)

    def counted_summaries(db, builds, every=False, kind=breaks_page.BREAKS):
        if kind == breaks_page.BREAKS:
            asked["breaks"].update(build["id"] for build in builds)
        return summaries(db, builds, every, kind)

    monkeypatch.setattr(charts, "build_points", counted_points)
    monkeypatch.setattr(breaks_page, "build_summaries", counted_summaries)
    monkeypatch.setattr(charts, "build_cells", counted_cells)
    return asked


def _asked(derived: dict[str, set[int]]) -> set[int]:
    """The builds asked for, of both (the same), since the last call; ``derived["cells"]`` is left."""
    assert derived["charts"] == derived["breaks"]
    found = set(derived["charts"])
    derived["charts"].clear()
    derived["breaks"].clear()
    return found


def _builds(path: Path) -> list[int]:
    conn = sqlite3.connect(path)
    found = [row[0] for row in conn.execute("SELECT id FROM torch_builds ORDER BY nightly_date")]
    conn.close()
    return found


def _same_as_from_scratch(path: Path, out: Path, scratch: Path) -> None:
    _publish(path, scratch)
    assert site_files(out) == site_files(scratch)
    assert "whole history" in (out / "cases" / "append_last.html").read_text()


def test_a_night_derives_the_overview_of_the_new_build_only(tmp_path, derived):
    path, out = tmp_path / "history.db", tmp_path / "site"
    _history(path, NIGHTS)
    _publish(path, out)
    assert _asked(derived) == set(_builds(path))
    _add_night(path, NIGHTS)
    _publish(path, out)
    assert _asked(derived) == {_builds(path)[-1]}
    _same_as_from_scratch(path, out, tmp_path / "scratch")


def test_a_night_derives_what_the_detailed_charts_draw_of_the_new_build_only(tmp_path, derived):
    path, out = tmp_path / "history.db", tmp_path / "site"
    _history(path, NIGHTS)
    _publish(path, out)
    assert derived["cells"] == set(_builds(path)[-3:])
    derived["cells"].clear()
    _add_night(path, NIGHTS)
    _publish(path, out)
    assert derived["cells"] == {_builds(path)[-1]}
    memo = (out / inputs.MEMO).read_text()
    assert memo.count('"cells append_last"') == 3  # the builds drawn in detail, and no others
    _same_as_from_scratch(path, out, tmp_path / "scratch")


CHANGES = {
    "a run's compile time": "UPDATE runs SET compile_s = 99 WHERE torch_build_id = {build}",
    "a run's latency marked noisy": "UPDATE runs SET timing_noisy = 1 WHERE torch_build_id = {build}",
    "a graph break's wording": "UPDATE graph_breaks SET reason = 'reworded', location = 'model.py:7' "
    "WHERE run_id IN (SELECT id FROM runs WHERE torch_build_id = {build})",
    "a graph break added": "INSERT INTO graph_breaks (run_id, key, gb_type, reason, count) "
    "SELECT max(id), 'GB0001', 'Data-dependent branching', 'if x.item():', 2 FROM runs WHERE torch_build_id = {build}",
    "a run deleted": "; ".join(
        f'DELETE FROM "{table}" WHERE run_id = (SELECT min(id) FROM runs WHERE torch_build_id = {{build}})'
        for table in ("graph_breaks", "recompiles", "hidden_errors", "timings", "frames")
    )
    + "; DELETE FROM runs WHERE id = (SELECT min(id) FROM runs WHERE torch_build_id = {build})",
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_an_older_builds_changed_runs_are_derived_again(tmp_path, derived, change):
    path, out = tmp_path / "history.db", tmp_path / "site"
    _history(path, NIGHTS)
    _publish(path, out)
    changed = _builds(path)[1]
    conn = sqlite3.connect(path)
    with conn:
        conn.executescript(CHANGES[change].format(build=changed))
    conn.close()
    _asked(derived)
    _publish(path, out)
    assert _asked(derived) == {changed}
    _same_as_from_scratch(path, out, tmp_path / "scratch")


MEMOS = [
    "not JSON",
    '{"sources": 1}',
    '{"sources": "%s", "builds": {"1": 7}}',  # the format before lines
    '{"sources": "%s"}\n1\tno mark',
    '{"sources": "%s"}\n%b\t%m\t7',  # the first build's line, its JSON not a dict
    '{"sources": "%s"}\n%b\t%m\t{"charts append_last": ',  # cut short
]


@pytest.mark.parametrize("memo", MEMOS)
def test_a_memo_that_cannot_be_used_is_made_again(tmp_path, derived, memo):
    path, out = tmp_path / "history.db", tmp_path / "site"
    _history(path, NIGHTS)
    _publish(path, out)
    first = (out / inputs.MEMO).read_text().splitlines()[1].split("\t")
    (out / inputs.MEMO).write_text(memo.replace("%s", inputs.sources()).replace("%b", first[0]).replace("%m", first[1]))
    _add_night(path, NIGHTS)
    _publish(path, out)
    _same_as_from_scratch(path, out, tmp_path / "scratch")


def test_a_night_writes_the_lines_of_the_builds_it_kept_as_they_were_read(tmp_path, derived):
    """Only the new build's line is encoded: a kept line comes back as read, spaces and all."""
    path, out = tmp_path / "history.db", tmp_path / "site"
    _history(path, NIGHTS)
    _publish(path, out)
    lines = (out / inputs.MEMO).read_text().splitlines()
    key, mark, made = lines[1].split("\t")
    lines[1] = "\t".join([key, mark, json.dumps(json.loads(made), separators=(", ", ": "))])
    (out / inputs.MEMO).write_text("\n".join(lines) + "\n")
    _add_night(path, NIGHTS)
    _publish(path, out)
    after = (out / inputs.MEMO).read_text().splitlines()
    assert lines[1] in after
    assert len(after) == len(lines) + 1
    _publish(path, tmp_path / "scratch")
    pages, scratch = site_files(out), site_files(tmp_path / "scratch")
    assert pages.pop(inputs.MEMO) != scratch.pop(inputs.MEMO)  # the spaces, and nothing else
    assert pages == scratch
