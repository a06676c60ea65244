"""Probes that die or hang are recorded as crash or timeout; the matrix and earlier rows survive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TEST_CASES, diag, show
from factories import small

from diag import store

pytestmark = pytest.mark.slow  # real probes that crash and hang


def test_segfault_and_hang_are_recorded_and_the_matrix_carries_on(tmp_path):
    db = tmp_path / "faults.db"
    common = [*small(timing=True), "--db", str(db)]
    diag("run", "--case", "append_last", "--no-timing", *common, cwd=tmp_path)
    before = store.get_run(store.open_db(db), 1)

    done = diag(
        "run",
        "--case",
        str(TEST_CASES / "segfault.py"),
        "--case",
        str(TEST_CASES / "hang.py"),
        "--case",
        str(TEST_CASES / "oom_kill.py"),
        "--case",
        str(TEST_CASES / "garbage_exit.py"),
        "--case",
        "append_last",
        "--timeout",
        "25",
        "--no-timing",
        "--json",
        *common,
        cwd=tmp_path,
    )
    recorded = json.loads(done.stdout)
    assert [(r["case"], r["status"]) for r in recorded] == [
        ("segfault", "crash"),
        ("hang", "timeout"),
        ("oom_kill", "crash"),
        ("garbage_exit", "crash"),
        ("append_last", "pass"),
    ]
    runs = {r["case"]: r for r in recorded}
    killed = show(db, runs["oom_kill"]["id"], tmp_path)
    assert killed["signal"] == 9 and killed["error_type"] == "Signal"
    garbage = show(db, runs["garbage_exit"]["id"], tmp_path)
    assert garbage["error_type"] == "ProbeExit" and garbage["exit_code"] == 3
    assert "without a verdict" in garbage["stderr_tail"]
    crash = show(db, runs["segfault"]["id"], tmp_path)
    assert crash["signal"] == 11
    assert "about to crash" in crash["stderr_tail"]
    timeout = show(db, runs["hang"]["id"], tmp_path)
    assert timeout["error_type"] == "Timeout"

    after = store.get_run(store.open_db(db), 1)
    assert after == before
    assert store.integrity(store.open_db(db)) == "ok"


MEMORY_CGROUPS = Path("/sys/fs/cgroup/memory")


def _memory_cgroup(limit_mb: int) -> Path | None:
    """A cgroup v1 memory group of ``limit_mb``, or None where this machine lets no one make one."""
    group = MEMORY_CGROUPS / f"diag-test-{os.getpid()}-{time.monotonic_ns()}"
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(limit_mb * 2**20))
    except OSError:
        return None
    return group


def test_a_probe_the_kernel_ends_for_want_of_memory_is_said_to_be_out_of_memory(tmp_path):
    """A real OOM kill: the run is a crash by signal 9 whose error says out of memory, because the
    kernel's OOM-kill count rose while the pass ran (a plain SIGKILL stays 'Signal', above)."""
    group = _memory_cgroup(1500)
    if group is None:
        pytest.skip("no writable cgroup v1 memory controller here: a real OOM kill cannot be confined")
    db = tmp_path / "oom.db"
    args = ["--case", str(TEST_CASES / "outgrows_memory.py"), "--backend", "eager", "--no-timing", "--fullgraph"]
    runner = f'echo $$ > {group}/cgroup.procs && exec {sys.executable} -m diag run "$@"'
    try:
        subprocess.run(
            ["sh", "-c", runner, "sh", *args, "--new-tokens", "2", "--db", str(db)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        group.rmdir()
    run = show(db, 1, tmp_path)
    assert (run["status"], run["signal"], run["error_type"]) == ("crash", 9, "OutOfMemory"), run["error_message"]
    assert "out of memory (the kernel's OOM killer ended" in run["error_message"]
