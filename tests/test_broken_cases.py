"""A broken case is not a compiler finding: a run whose case fails in eager (``eager_error``) never
decides a cell another run decides, never makes a regression or a fix in check, compare or the
report, and a row whose runs on a build are all broken is compared across that build.

The runs are stored through the real store into real SQLite files (tests/factories.py); the report,
``diag check`` and ``diag compare`` read them as they read any history."""

from __future__ import annotations

import json

from conftest import cli
from factories import run_record, stored

from diag import store
from diag.build import identity
from diag.report import render
from diag.report.history import build_matrix
from diag.report.matrix_html import cell_html

OLD, MID, NEW = (identity(v, c * 40, None) for v, c in (("2.11.0+cpu", "a"), ("2.12.0+cpu", "b"), ("2.13.0+cpu", "c")))
BROKEN = {"status": "eager_error", "error_type": "ImportError", "error_message": "cannot import name 'LlamaConfig'"}
FAILS = {"status": "fullgraph_error", "error_type": "Unsupported", "error_message": "data-dependent branch"}


def _history(db_path, *cells) -> None:
    """``cells``: (build, [run fields, ...]) in the order they ran; every run of the append_last row."""
    for number, (build, runs) in enumerate(cells):
        for index, fields in enumerate(runs):
            at = f"2026-12-0{number + 1}T0{index}:00:00"
            stored(db_path, run_record(build=build, uid=f"u{number}-{index}", started_at=at, **fields))


def _matrix(db_path):
    db = store.open_db(db_path)
    return build_matrix(store.builds(db), store.report_runs(db), store.finding_keys(db))


def test_a_broken_first_build_is_not_a_failure_that_a_later_build_fixed(tmp_path):
    db_path = tmp_path / "h.db"
    _history(db_path, (OLD, [BROKEN]), (NEW, [{"status": "pass"}]))
    matrix = _matrix(db_path)
    (verdict,) = matrix.verdicts
    assert matrix.transitions == [] and verdict.episode is None
    assert verdict.state == "works" and [state for _, state, _ in verdict.strip] == ["works", "broken"]
    done = cli("check", "--db", str(db_path))
    assert done.exit_code == 0, done.output
    assert "REGRESSION" not in done.output
    assert "NOT COMPARED append_last" in done.output and "the case is broken before (eager_error" in done.output


def test_a_broken_build_between_two_is_skipped_and_the_fix_is_dated_after_it(tmp_path):
    db_path = tmp_path / "h.db"
    _history(db_path, (OLD, [FAILS]), (MID, [BROKEN]), (NEW, [{"status": "pass"}]))
    matrix = _matrix(db_path)
    (transition,) = matrix.transitions
    assert (transition.kind, transition.last_before["version"], transition.first_after["version"]) == (
        "fix",
        "2.11.0+cpu",
        "2.13.0+cpu",
    )
    (verdict,) = matrix.verdicts
    assert verdict.episode.first_bad["version"] == "2.11.0+cpu"
    assert verdict.episode.fixed_in["version"] == "2.13.0+cpu"
    middle = matrix.cell(matrix.rows[0], [b for b in matrix.builds if b["version"] == "2.12.0+cpu"][0]["id"])
    assert middle.state == "broken" and not middle.changed


def test_a_broken_run_never_hides_the_status_and_counts_of_the_run_that_measured(tmp_path):
    db_path = tmp_path / "h.db"
    measured = {"status": "graph_break", "graph_break_count": 7, "recompile_count": 0, "hidden_error_count": 1}
    _history(db_path, (NEW, [measured, BROKEN]))
    matrix = _matrix(db_path)
    cell = matrix.cell(matrix.rows[0], matrix.builds[0]["id"])
    assert cell.run["status"] == "graph_break" and cell.state == "works" and cell.worst == "graph_break"
    assert cell.tally == "1/1 work, 1 broken"
    html = str(cell_html(cell, "", {}))
    assert "s-graph_break" in html.split('<span class="counts">')[0]
    assert "7b · 0r · 1h" in html


def test_a_case_broken_on_the_new_build_is_no_regression_in_check_compare_or_the_report(tmp_path):
    db_path = tmp_path / "h.db"
    _history(db_path, (OLD, [{"status": "pass"}]), (NEW, [BROKEN]))
    assert _matrix(db_path).transitions == []
    done = cli("check", "--db", str(db_path), "--json")
    assert done.exit_code == 0, done.output
    outcome = json.loads(done.output)
    assert outcome["regressions"] == []
    assert "the case is broken after (eager_error: ImportError" in json.dumps(outcome)
    compared = cli("compare", "2.11.0", "2.13.0", "--db", str(db_path))
    assert compared.exit_code == 0 and "not compared: the case is broken after" in compared.output
    site = render(store.open_db(db_path), tmp_path / "site")
    index = json.loads(site["report.json"])
    assert index["transitions"] == [] and [v["state"] for v in index["verdicts"]] == ["broken"]
    assert "broken case" in site["index.html"]


def test_compare_of_two_runs_names_the_variant_and_python_they_differ_in(tmp_path):
    """As a comparison of two builds does: what besides torch differs between the two runs."""
    db_path = tmp_path / "h.db"
    old = stored(db_path, run_record(build=identity("2.0.1+cu117", "e" * 40, "11.7"), uid="a", python="3.10.13"))
    new = stored(db_path, run_record(build=NEW, uid="b", python="3.11.7"))
    done = cli("compare", str(old), str(new), "--db", str(db_path))
    assert done.exit_code == 0, done.output
    said = done.output.splitlines()[0]
    assert "also different: variant cu117 -> cpu; CUDA 11.7 -> none; Python 3.10 -> 3.11" in said, said


GUARDS = {
    "key": "TypeError:VariableBuilder.__init__() got an unexpected keyword argument 'guards'",
    "exc_type": "TypeError",
    "message": "VariableBuilder.__init__() got an unexpected keyword argument 'guards'",
    "source": "log",
    "count": 7,
}


def test_a_hidden_error_key_has_a_page_linked_from_its_case_line_though_the_newest_build_lacks_it(tmp_path):
    """The seed's own hidden error (the 'guards' TypeError of torch 2.1 nightlies) seen on an old build
    only: its page says where it was first and last seen, and the case's line on the front page links
    it, where before only the newest build's hidden errors were named, and none had a page."""
    db_path = tmp_path / "h.db"
    swallowed = {"status": "graph_break", "hidden_error_count": 1, "hidden_errors": [GUARDS]}
    _history(db_path, (OLD, [swallowed]), (MID, [swallowed]), (NEW, [{"status": "pass"}]))
    site = render(store.open_db(db_path), tmp_path / "site")
    (page,) = [name for name in site if name.startswith("hidden/")]
    text = site[page]
    assert "VariableBuilder.__init__() got an unexpected keyword argument &#39;guards&#39;" in text
    assert "from <b>2.11.0+cpu</b> to <b>2.12.0+cpu</b>" in text and "not on the newest, 2.13.0+cpu" in text
    line = site["index.html"].split('<tr data-case="append_last"')[1].split("</tr>")[0]
    assert f'href="{page}"' in line and "2.11.0+cpu to 2.12.0+cpu" in line
