"""What check and compare say they judged: per figure, how many rows with runs on both sides were
judged, and why the others were not, so that "no regressions" never stands for "nothing judged"."""

from __future__ import annotations

import json

from conftest import cli as run_cli
from test_regress import _run, _runs

from diag import verdict_text
from diag.verdicts import coverage, gate, regress

ALPHA = regress.Thresholds().alpha


def _lines(comparisons):
    return {found.figure: found.line() for found in coverage.coverage(comparisons, ALPHA)}


def test_one_run_a_side_judges_the_findings_and_says_why_not_the_latency():
    base, slower = _runs(1, 1e-3, 1, 1), _runs(10, 1.2e-3, 1, 2)
    said = _lines([regress.compare_runs(base[0], slower[0])])
    assert said["status and findings"] == "status and findings: 1 of 1 row judged"
    assert said["compiled latency"] == (
        "compiled latency: 0 of 1 row judged; not judged: 1 with 1 run a side, a verdict needs 4 (diag run --repeat 4)"
    )
    assert "eager latency" not in said and "compile time" not in said  # no row has them: no line


def test_enough_steady_runs_are_judged_and_noisy_ones_say_so():
    base, same = _runs(1, 1e-3, 5, 1), _runs(10, 1e-3, 5, 2)
    assert _lines([regress.compare_runs(base[-1], same[-1], base, same)])["compiled latency"].endswith(
        "1 of 1 row judged"
    )
    noisy = [{**run, "timing_noisy": 1, "timing_note": "timing noisy (steps spread)"} for run in same]
    said = _lines([regress.compare_runs(base[-1], noisy[-1], base, noisy)])["compiled latency"]
    assert said == (
        "compiled latency: 0 of 1 row judged; not judged: 1 with every run of a side noisy (rerun on a quieter machine)"
        "; 5 runs left out: noisy (its steps or host reference spread, or its median's interval too wide)"
    )


def test_a_broken_case_and_an_untimed_side_are_named():
    broken = regress.compare_runs(_run(1), _run(2, status="eager_error"))
    untimed = regress.compare_runs(_runs(3, 1e-3, 1, 3)[0], {**_run(4), "timings": []})
    said = _lines([broken, untimed])
    assert (
        said["status and findings"]
        == "status and findings: 1 of 2 rows judged; not judged: 1 the case is broken on a side"
    )
    assert "1 the case is broken on a side" in said["compiled latency"]
    assert "1 not timed on a side (--no-timing)" in said["compiled latency"]


def test_check_ends_with_what_it_judged_then_its_verdict():
    base, slower = _runs(1, 1e-3, 1, 1), _runs(10, 1.2e-3, 1, 2)
    lines = verdict_text.check_lines(gate.Outcome("b against a", [regress.compare_runs(base[0], slower[0])], []), ALPHA)
    judged = [line for line in lines if line.startswith("judged: ")]
    assert judged == [
        "judged: status and findings: 1 of 1 row judged",
        "judged: compiled latency: 0 of 1 row judged; not judged: 1 with 1 run a side, a verdict needs 4"
        " (diag run --repeat 4)",
    ]
    assert lines[-1] == "no regressions" and lines[-3:-1] == judged


def test_check_and_compare_on_a_recorded_history_say_what_they_judged(copied_db):
    done = run_cli("check", "--db", str(copied_db))
    lines = done.output.splitlines()
    assert any(line.startswith("judged: status and findings: ") for line in lines), done.output
    verdict = json.loads(run_cli("check", "--db", str(copied_db), "--json").output)
    assert verdict["judged"][0]["figure"] == "status and findings" and verdict["judged"][0]["rows"] >= 1
    compared = run_cli("compare", "1", "2", "--db", str(copied_db))
    assert "judged: status and findings: " in compared.output
    assert json.loads(run_cli("compare", "1", "2", "--db", str(copied_db), "--json").output)["judged"]
