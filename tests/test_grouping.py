"""The test run's own plumbing: tests that share a costly fixture (a provisioned torch build, the
findings matrix) run on one pytest-xdist worker (``--dist loadgroup``, tests/conftest.py), so the
fixture is built once. pytest 9 with pytest-xdist 3.8 silently spread them over every worker."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest


@pytest.mark.slow  # starts pytest with two workers
def test_a_group_runs_on_one_worker(tmp_path):
    (tmp_path / "test_grouped.py").write_text(
        "import pytest\n\n\n"
        '@pytest.mark.xdist_group("shared")\n'
        '@pytest.mark.parametrize("index", range(6))\n'
        "def test_member(index):\n"
        "    pass\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    workers = re.findall(r"^\[(gw\d+)\].*PASSED", done.stdout, re.MULTILINE)
    assert len(workers) == 6 and len(set(workers)) == 1, done.stdout
