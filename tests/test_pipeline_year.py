"""The nightly publish job, night by night, with the workflow's own commands (bench/pipeline_year.py).

A local bare repository stands in for GitHub's gh-pages branch (GitHub cannot be reached from
the test machines). Each night's shards are written at the size the real legs write them: the
four cases timed, and every transformers architecture untimed.

This is the short form: 36 nights of 40 architectures (every one that breaks in them, and more),
an architecture breaking on the nightly every 5 nights, so that prune (``--thin-after 30``, as
nightly.yml runs it) thins the oldest 6 nightlies, a break among them included. Each night's shards
then hold 40 of the 182 architectures' runs: what each night is checked for (nothing lost, bounded,
every change a transition) does not depend on how many rows change nothing. The year (365 nights,
182 architectures, about 35 minutes) is ``python bench/pipeline_year.py --nights 365 --work DIR``;
docs/BENCHMARKS.md has its figures.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from pipeline_year import RELEASES, Year, _outcome  # after sys.path names bench/

from diag import store
from diag.cli import cli
from diag.report.history import build_matrix

NIGHTS = 36
BREAK_EVERY = 5
FAILS = 5  # the night whose gh-pages checkout fails
ARCHITECTURES = 40  # every one that breaks in NIGHTS (NIGHTS // BREAK_EVERY + 1 of them), and more


def _changes(nights: int) -> set[tuple[str, int, int]]:
    """(case, fullgraph, night) of each nightly where an architecture starts or stops working."""
    works = ("pass", "graph_break")
    found = set()
    for architecture in range(ARCHITECTURES):
        for fullgraph in (1, 0):
            before = _outcome(0, RELEASES[-1], architecture, fullgraph, BREAK_EVERY) in works
            for night in range(1, nights + 1):
                now = _outcome(night, "2.16.0.dev", architecture, fullgraph, BREAK_EVERY) in works
                if now != before:
                    found.add((f"hf:arch{architecture:03d}", fullgraph, night))
                before = now
    return found


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_nights_stay_bounded_lose_no_run_and_survive_a_failed_checkout(tmp_path):
    runner = CliRunner()

    def invoke(*command: str) -> int:
        return runner.invoke(cli, list(command)).exit_code

    # the report renders on the last night only: the branch holds one night's site, the last one
    year = Year(
        tmp_path,
        invoke,
        report_nights={NIGHTS},
        checkout_fails={FAILS},
        break_every=BREAK_EVERY,
        architectures=ARCHITECTURES,
    )
    published = []

    def head() -> str:
        return subprocess.run(
            ["git", "rev-parse", "gh-pages"], cwd=year.pages, capture_output=True, text=True
        ).stdout.strip()

    try:
        for night in range(1, NIGHTS + 1):
            before = head()
            shards = year.legs(night)
            ok = year.publish(night, shards, measure=night == NIGHTS)
            if night == FAILS:
                # a failed checkout fails the job: nothing is published over the history
                assert not ok and head() == before
                year.checkout_fails.clear()
                assert year.publish(night, shards)  # the re-run of the failed job: the next attempt recovers
            else:
                assert ok
            published.append(head())
            shutil.rmtree(shards[0].parent.parent)
    finally:
        year.close()
    # the sizes measured night by night stay beside the test's files (docs/BENCHMARKS.md quotes them)
    (tmp_path / "sizes.json").write_text(json.dumps(year.sizes))
    history = year.site / "history.db"
    db = sqlite3.connect(history)
    # no night lost a run: every run every leg wrote is in the history, whole, compacted or counted
    kept, folded = db.execute("SELECT (SELECT count(*) FROM runs), (SELECT sum(runs) FROM folded_runs)").fetchone()
    assert kept + folded == year.stored
    # prune thinned the nightlies older than the newest 30: their unchanging rows are counts now
    thinned = db.execute(
        "SELECT count(DISTINCT f.torch_build_id) FROM folded_runs f JOIN torch_builds b ON b.id = f.torch_build_id "
        "WHERE b.nightly_date IS NOT NULL AND b.nightly_date < ?",
        [str(dt.date(2027, 1, 1) + dt.timedelta(days=NIGHTS - 30))],
    ).fetchone()[0]
    assert thinned >= NIGHTS - 30 - 1
    # one commit on the branch: no night's copy of the history stays in it
    count = subprocess.run(
        ["git", "rev-list", "--count", "gh-pages"], cwd=year.pages, capture_output=True, text=True
    ).stdout.strip()
    assert count == "1" and len(set(published)) == NIGHTS
    assert (year.site / "index.html").exists()
    # every night of a year stays under GitHub's limits (a file over 100 MB is refused)
    assert max(year.history_sizes) < 100 * 2**20 and len(year.history_sizes) == NIGHTS
    assert max(branch for _, _, branch in year.sizes) < 2**30, year.sizes
    # every change of the year is still a transition in the history, with both its builds
    opened = store.open_db(history)
    matrix = build_matrix(store.builds(opened), store.report_runs(opened), {})
    first = dt.date(2027, 1, 1)
    seen = {
        (t.row.case, t.row.fullgraph, (dt.date.fromisoformat(t.first_after["nightly_date"]) - first).days)
        for t in matrix.transitions
        if t.row.case.startswith("hf:") and t.first_after["nightly_date"]
    }
    assert seen == _changes(NIGHTS)
