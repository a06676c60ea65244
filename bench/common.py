"""What bench/run.py's parts share: where things are, the cases, timing a command, the nightly leg."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

BENCH = REPO / "bench"

CASES = ["append_last", "dynamic_slice", "hf_static_cache", "hf_dynamic_cache"]


def timed(command: list[str], env: dict | None = None, cwd: Path | None = None) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{command} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - start, done.stdout


def environ(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_")}
    env.update(extra)
    return env


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


LEG = ["--case", "all", "--threads", "1", "--repeat", "5", "--timing-seconds", "2"]  # as nightly.yml's CPU legs


def leg_option(name: str) -> str:
    """A setting of the nightly CPU leg's `diag run` (tests/test_bench.py holds LEG to nightly.yml)."""
    return LEG[LEG.index(name) + 1]
