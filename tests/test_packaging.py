"""diag installed from its wheel (not editable) works: the cases ship in the package, probes run.

A fresh virtualenv gets the wheel and its dependencies from the package index; the probe then
runs in this interpreter, which has torch (the virtualenv does not need it).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO

from diag.run.catalog import builtin_cases

pytestmark = pytest.mark.slow  # builds a wheel and installs it with its dependencies


def test_the_wheel_lists_and_runs_the_built_in_cases(tmp_path):
    dist, venv = tmp_path / "dist", tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = dist.glob("diag-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    work = tmp_path / "work"  # not the checkout: nothing of it may be found by accident
    work.mkdir()
    diag = str(venv / "bin" / "diag")
    cases = json.loads(
        subprocess.run([diag, "cases", "--json"], cwd=work, capture_output=True, text=True, check=True).stdout
    )
    assert {c["name"] for c in cases} == {ref.name for ref in builtin_cases()} and len(cases) >= 4
    assert all(str(venv) in c["path"] for c in cases)
    done = subprocess.run(
        [
            diag,
            "run",
            "--case",
            "append_last",
            "--torch",
            sys.executable,
            "--backend",
            "eager",
            "--fullgraph",
            "--no-timing",
            "--new-tokens",
            "2",
            "--prompt-length",
            "4",
            "--db",
            "x.db",
            "--json",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = json.loads(done.stdout)
    assert run["status"] == "pass" and str(venv) in run["case_path"]
