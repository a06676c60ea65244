"""Probes that die or hang are recorded as crash or timeout; the matrix and earlier rows survive."""

from __future__ import annotations

import json

import pytest
from conftest import TEST_CASES, diag, show

from diag import store

pytestmark = pytest.mark.slow  # real probes that crash and hang


def test_segfault_and_hang_are_recorded_and_the_matrix_carries_on(tmp_path):
    db = tmp_path / "faults.db"
    common = ["--backend", "eager", "--fullgraph", "--new-tokens", "3", "--prompt-length", "6", "--db", str(db)]
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
