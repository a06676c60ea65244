"""The nightly publish job, night after night, with the workflow's own commands (tests/pipeline_year.py).

A local bare repository stands in for GitHub's gh-pages branch (GitHub cannot be reached from
the test machines). The run goes past prune's 14-build window, so that the nights measured
at the end are the steady state a year continues; bench/BENCHMARKS.md has the full year.
"""

from __future__ import annotations

import sqlite3
import subprocess

import pytest
from click.testing import CliRunner

from diag.cli import cli
from pipeline_year import Year

NIGHTS = 22
YEAR = 365


@pytest.mark.slow
def test_a_year_of_nights_stays_bounded_loses_no_run_and_survives_a_failed_checkout(tmp_path):
    runner = CliRunner()

    def invoke(*command: str) -> int:
        return runner.invoke(cli, list(command)).exit_code

    year = Year(tmp_path, invoke, report_nights={1, NIGHTS}, checkout_fails={5})
    published = []

    def head() -> str:
        return subprocess.run(["git", "rev-parse", "gh-pages"], cwd=year.pages, capture_output=True,
                              text=True).stdout.strip()

    for night in range(1, NIGHTS + 1):
        before = head()
        shards = year.legs(night)
        ok = year.publish(night, shards)
        if night == 5:
            # a failed checkout fails the job: nothing is published over the history
            assert not ok and head() == before
            year.checkout_fails.clear()
            assert year.publish(night, shards)  # the re-run of the failed job
        else:
            assert ok
        published.append(head())
    # no night lost a run: the published history holds every run every leg wrote
    history = year.site / "history.db"
    assert sqlite3.connect(history).execute("SELECT count(*) FROM runs").fetchone()[0] == year.stored
    # one commit on the branch: no night's copy of the history stays in it
    count = subprocess.run(["git", "rev-list", "--count", "gh-pages"], cwd=year.pages, capture_output=True,
                           text=True).stdout.strip()
    assert count == "1" and len(set(published)) == NIGHTS
    assert (year.site / "index.html").exists()
    # past the window, each night adds only compacted runs: a year stays under GitHub's limits
    (first, size_a, branch_a), (last, size_b, branch_b) = year.sizes[-5], year.sizes[-1]
    per_night, branch_per_night = (size_b - size_a) / (last - first), (branch_b - branch_a) / (last - first)
    assert size_b + per_night * (YEAR - last) < 100 * 2**20, (size_b, per_night)
    assert branch_b + branch_per_night * (YEAR - last) < 2**30, (branch_b, branch_per_night)
