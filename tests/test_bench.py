"""The benchmark script still runs (its numbers are recorded by hand in docs/BENCHMARKS.md)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest
from conftest import REPO


@pytest.mark.slow
def test_bench_quick_runs_every_part(tmp_path):
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "run.py"), "--quick", "--parts", "overhead,matrix,scale,fidelity,leg"],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for heading in (
        "### 1. Overhead",
        "### 2. Matrix throughput",
        "### 3. Storage and report at scale",
        "### 4. Timing fidelity",
        "### Nightly CPU leg",
    ):
        assert heading in done.stdout
    assert "| runs | 1,000 |" in done.stdout


@pytest.mark.parametrize(
    "script, options, rows",
    [
        (
            "report_steps.py",
            ["--repeats", "1"],
            ["| the model |", "| the charts |", "| total |", "| imports of `diag report`, apart |"],
        ),
        (
            "report_scale.py",
            ["--repeats", "1"],
            ["| from scratch | `--processes 2` |", "| one night later | `--processes 1` |"],
        ),
        ("report_nights.py", ["--nights", "3"], ["then 3 nights", "| `this checkout` |", " of 3 |"]),
    ],
)
def test_the_report_benchmarks_run_on_a_small_history(tmp_path, script, options, rows):
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), "--runs", "192", *options],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "192 synthetic runs" in done.stdout
    for row in rows:
        assert row in done.stdout, done.stdout


@pytest.mark.slow
def test_the_gpu_bench_runs_in_its_cpu_form(tmp_path):
    """bench/gpu.py --cpu: the seed's three cases raced with --profile on the eager backend, and a run of
    each for memory; the summary names every variant with a verdict and its top op groups."""
    out = tmp_path / "cpu.md"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "gpu.py"), "--cpu", "--out", str(out), "--timing-seconds", "0.2"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = out.read_text()
    for case in ("dynamic_slice", "hf_static_cache"):
        (line,) = [line for line in summary.splitlines() if line.startswith(f"| {case} | x")]
        assert "CPU flash" in line and "+" in line.split("|")[5], line
    assert summary.count("| rss_rise |") == 3


@pytest.mark.slow
def test_the_probe_parents_bench_compares_against_an_earlier_commit(tmp_path):
    """--baseline runs the first side from a commit's tree (HEAD here: its records must equal this
    code's, and its runs must have run that tree's diag, not this checkout's)."""
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "parents.py"), "--case", "append_last", "--baseline", "HEAD"]
        + ["--work", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["baseline"] == "HEAD"
    assert result["alone"]["runs"] == result["forked"]["runs"] == 2
    assert result["rows_differing"] == []
    assert (tmp_path / "baseline" / "diag" / "probe" / "supervise.py").is_file()
    # a built-in case is a file of the diag that ran it
    paths = [row[0] for row in sqlite3.connect(tmp_path / "alone.db").execute("SELECT case_path FROM runs")]
    assert paths and all(path.startswith(str(tmp_path / "baseline" / "diag")) for path in paths), paths


def test_the_change_point_and_flaky_bisect_benchmarks_run():
    """bench/changes.py's accuracy parts on two seeds, and bench/bisect_flaky.py on 20 trials: they run
    and report their figures (what the figures are is docs/BENCHMARKS.md's, never asserted here)."""
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "changes.py"), "--parts", "step,aa,creep,runner", "--seeds", "2"],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    parts = [json.loads(line)["part"] for line in done.stdout.splitlines()]
    assert parts == ["step", "aa", "creep", "runner"]
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bisect_flaky.py"), "--trials", "20", "--rates", "0.33,1"],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    found = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(f["rate"], f["trials"]) for f in found] == [(0.33, 20), (1.0, 20)]
