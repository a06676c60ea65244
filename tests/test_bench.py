"""The benchmark script still runs (its numbers are recorded by hand in docs/BENCHMARKS.md)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import yaml

from conftest import REPO


@pytest.mark.slow
def test_bench_quick_runs_every_part(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "bench" / "run.py"), "--quick", "--parts",
                           "overhead,matrix,scale,fidelity,leg"], capture_output=True, text=True, timeout=1800,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    for heading in ("### 1. Overhead", "### 2. Matrix throughput", "### 3. Storage and report at scale",
                    "### 4. Timing fidelity", "### Nightly CPU leg"):
        assert heading in done.stdout
    assert "| runs | 1,000 |" in done.stdout


def test_the_benchmark_times_what_a_nightly_cpu_leg_runs():
    """Fidelity and the leg's timing are measured at the settings the CPU legs really use."""
    spec = importlib.util.spec_from_file_location("bench_run", REPO / "bench" / "run.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())
    timed, = [step["run"].split() for step in workflow["jobs"]["cpu"]["steps"]
              if str(step.get("run", "")).startswith("diag run") and "hf:all" not in step["run"]]
    for option in ("--threads", "--repeat", "--timing-seconds"):
        assert bench.leg_option(option) == timed[timed.index(option) + 1], option
