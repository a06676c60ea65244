"""Change points over the history: the method on seeded series, then `diag changes` and `check
--changes` on real SQLite files written from bench/synthetic.py's drift histories."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import pytest
from conftest import cli, diag_here

from diag import store
from diag.verdicts import changepoints

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import synthetic  # after sys.path names bench/


def noisy(seed: int, n: int, cv: float, factor) -> list[float]:
    rng = random.Random(seed)
    return [10 * math.exp(rng.gauss(0, cv)) * factor(t) for t in range(n)]


def test_a_step_is_dated_to_its_build_and_sized_with_an_interval_that_holds_it():
    values = noisy(1, 365, 0.01, lambda t: 1.05 if t >= 200 else 1.0)
    [shift] = changepoints.shifts(values, "ratio")
    assert (shift.start, shift.end, shift.kind) == (200, 200, "step")
    assert shift.low < 1.05 < shift.high and shift.high - shift.low < 0.02


def test_no_change_in_a_flat_history_with_one_bad_night():
    values = noisy(2, 365, 0.01, lambda t: 1.0)
    values[150] *= 1.4  # a night the noise rules did not mark
    assert changepoints.shifts(values, "ratio") == []


def test_a_creep_is_one_change_dated_to_where_it_started():
    at = 150
    values = noisy(3, 365, 0.01, lambda t: 1.03 ** (4 * min(max((t - at + 1) / 28, 0), 1)))
    [shift] = changepoints.shifts(values, "ratio")
    assert shift.kind == "creep" and abs(shift.start - at) <= 3 and shift.end - shift.start > 14
    assert 1.10 < shift.size < 1.15


def test_a_count_moves_by_units():
    values = [3.0] * 40 + [4.0] * 30
    [shift] = changepoints.shifts(values, "count")
    assert (shift.start, shift.size, shift.kind) == (40, 1.0, "step")


def test_a_count_that_changes_for_one_build_is_no_change_point():
    assert changepoints.shifts([3.0] * 40 + [5.0] + [3.0] * 30, "count") == []


def write(path: Path, records) -> Path:
    db = store.open_db(path)
    store.save_runs(db, records)
    db.conn.close()
    return path


def listed(db: Path, *extra: str) -> dict:
    result = cli("changes", "--db", str(db), "--json", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_changes_names_the_first_build_that_moved_its_range_and_interval(tmp_path):
    db = write(tmp_path / "h.db", synthetic.drift(4, nightlies=160, kind="step", at=100, size=0.08))
    found = listed(db, "--stable", synthetic.STABLE)
    [change] = found["changes"]
    assert change["metric"] == "compiled_ms_per_token" and change["kind"] == "step"
    assert change["first_build"] == "2.8.0.dev20250411" and change["before_build"] == "2.8.0.dev20250410"
    assert change["low"] < 1.08 < change["high"] and change["worse"] and change["runner"] is None
    assert all(len(commit) == 40 for commit in change["commits"])
    assert change["twin"].startswith(f"stable {synthetic.STABLE} moved x1.0")
    text = cli("changes", "--db", str(db), "--stable", synthetic.STABLE).output
    assert "WORSE compiled ms/token x1.0" in text and "from 2.8.0.dev20250411" in text


def test_a_run_marked_noisy_or_waited_is_no_point(tmp_path):
    """The same slow nights: marked, they move nothing; unmarked, they are a change point."""
    made = {}
    for marked in (True, False):
        records = list(synthetic.drift(5, nightlies=160, twin=False))
        for record in records:
            day = int(record.run["uid"].split("-")[2])
            if 100 <= day < 110:
                record.run["compiled_ms_per_token"] *= 1.5
                record.run["compile_s"] *= 1.5
                if marked:
                    record.run["timing_noisy"], record.run["compile_noisy"] = 1, 1
        made[marked] = listed(write(tmp_path / f"{marked}.db", records))["changes"]
    assert made[True] == []
    assert {c["metric"] for c in made[False]} == {"compiled_ms_per_token", "compile_s"}


def test_a_runner_change_the_stable_twin_shared_is_the_runners(tmp_path):
    db = write(tmp_path / "r.db", synthetic.drift(6, nightlies=160, row_count=2, runner_at=100))
    told = listed(db, "--stable", synthetic.STABLE)
    assert told["changes"] and all(c["runner"] for c in told["changes"])
    # dated to the night the runner slowed, give or take one on the noisier figures (2% a night)
    assert {c["first_build"] for c in told["changes"]} <= {f"2.8.0.dev2025041{d}" for d in (0, 1, 2)}
    untold = listed(db)
    assert "not told apart" in untold["runner"] and all(c["runner"] is None for c in untold["changes"])


def test_check_changes_fails_once_on_the_night_a_creep_passes_and_names_its_start(tmp_path):
    at, nights = 70, 110
    records = list(synthetic.drift(7, nightlies=nights, kind="creep", size=0.03, at=at))

    def upto(night: int):
        return [r for r in records if int(r.run["uid"].split("-")[2]) <= night]

    db = write(tmp_path / "c.db", upto(at - 1))
    failed = []
    for night in range(at, nights):
        write(db, [r for r in upto(night) if int(r.run["uid"].split("-")[2]) == night])
        result = cli("check", "--changes", "--stable", synthetic.STABLE, "--db", str(db), "--json")
        shown = json.loads(result.output)["changes"]
        if shown:
            assert result.exit_code == 1
            failed.append((night, shown))
    assert len(failed) == 1, [n for n, _ in failed]
    [(night, [change])] = failed
    first = synthetic.dt.datetime.strptime(change["first_build"].split("dev")[1], "%Y%m%d").date()
    assert abs((first - synthetic.dt.date(2025, 1, 1)).days - at) <= 8
    assert at + 7 <= night < at + 28 and change["kind"] == "creep"


def test_changes_refuses_bad_input_in_one_line(tmp_path):
    db = write(tmp_path / "h.db", synthetic.drift(8, nightlies=10))
    for args, status, said in (
        (["--since", "yesterday"], 2, "is not a date"),
        (["--metric", "speed"], 2, "Invalid value for '--metric'"),
        (["--stable", "9.9.9"], 1, "9.9.9"),
    ):
        done = diag_here("changes", "--db", str(db), *args, cwd=tmp_path)
        assert done.returncode == status and said in done.stderr and len(done.stderr.strip().splitlines()) == 1
    empty = write(tmp_path / "empty.db", [])
    done = diag_here("changes", "--db", str(empty), cwd=tmp_path)
    assert done.returncode == 1 and "no runs" in done.stderr


@pytest.mark.parametrize("since,count", [("2025-01-01", 1), ("2025-06-01", 0)])
def test_since_keeps_the_change_points_from_that_date(tmp_path, since, count):
    db = write(tmp_path / "h.db", synthetic.drift(4, nightlies=160, kind="step", at=100, size=0.08))
    assert len(listed(db, "--since", since)["changes"]) == count


def test_the_report_lists_the_change_and_marks_it_on_its_case_chart(tmp_path):
    """In a real browser: the front page's table of change points names the first build that moved,
    and the case page's latency chart draws a mark there whose tooltip says the size and the row."""
    import browser

    db = write(tmp_path / "h.db", synthetic.drift(3, nightlies=120, kind="step", at=80, size=0.08, row_count=2))
    out = tmp_path / "site"
    assert cli("report", "--db", str(db), "--out", str(out)).exit_code == 0
    front = browser.measure(
        out / "index.html",
        1400,
        900,
        "return [...d.querySelectorAll('#changes tbody tr')].map(r => r.innerText)",
        tmp_path / "front",
    )
    [row] = front
    assert "2.8.0.dev20250322" in row and "after 2.8.0.dev20250321" in row and "compiled ms/token" in row
    assert "stable 2.7.1 moved" in row  # the release run each night, taken as the twin
    marks = browser.measure(
        out / "cases" / "append_last.html",
        1400,
        900,
        "return [...d.querySelectorAll('g.change')].map(g => [g.closest('.chart').getAttribute('aria-label'),"
        " g.querySelector('title').textContent, g.querySelector('text').textContent])",
        tmp_path / "case",
    )
    assert [m[0] for m in marks] == ["Compiled per-token latency", "Compiled per-token latency, whole history"]
    assert all(m[2].startswith("x1.07") and "from 2.8.0.dev20250322" in m[1] and "append_last" in m[1] for m in marks)


@pytest.mark.parametrize("seed", range(8))
def test_each_best_split_is_the_one_ruptures_finds(seed):
    """diag's split search against the maintained library's binary segmentation (least squares, the
    same smallest level): the same first split on noisy series with a step, a creep or none."""
    import numpy as np
    import ruptures

    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 200))
    at = int(rng.integers(3, n - 3))
    points = (
        rng.normal(0, 1, n) + (np.arange(n) >= at) * rng.choice([0.0, 1.0, 3.0]) + np.arange(n) * rng.choice([0, 0.02])
    )
    theirs = ruptures.Binseg(model="l2", min_size=changepoints.MIN_SIZE, jump=1).fit(points).predict(n_bkps=1)[0]
    assert changepoints.best_split(points)[0] == theirs


def test_a_count_that_changed_offers_the_bisect_that_searches_it(tmp_path):
    records = list(synthetic.drift(9, nightlies=60, twin=False))
    for record in records:
        if int(record.run["uid"].split("-")[2]) >= 40:
            record.run["graph_break_count"] = 4
    db = write(tmp_path / "h.db", records)
    [change] = listed(db, "--metric", "graph_break_count")["changes"]
    assert (change["size"], change["first_build"], change["bisect_on"]) == (
        1.0,
        "2.8.0.dev20250210",
        "count:graph_breaks",
    )
    text = cli("changes", "--db", str(db), "--metric", "graph_break_count").output
    assert "bisect: diag bisect --case append_last --backend inductor --no-fullgraph" in text
    assert "--good 2.8.0.dev20250209 --bad 2.8.0.dev20250210 --on count:graph_breaks" in text
    every = cli("changes", "--db", str(db)).output  # a time's change, were there one, offers no bisect
    assert every.count("--on count:") == 1 and every.count("bisect: diag bisect judges") == every.count("bisect: ") - 1
