"""One import per environment: runs forked from a long-lived probe parent (diag/run/parents.py,
diag/probe/parent.py) give what a process per run gives, and nothing of one run reaches the next."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import TEST_CASES, diag
from factories import small

from diag import store

pytestmark = pytest.mark.slow  # real probes, real torch compiles


def _launches(db) -> list[dict]:
    return [json.loads(r["capabilities"])["probe_process"] for r in store.open_db(db).query("SELECT * FROM runs")]


def _findings(db) -> list[tuple]:
    """What each run found: status, counts, and the keys and frames of its findings, by row."""
    handle = store.open_db(db)
    found = []
    for run in handle.query('SELECT * FROM runs ORDER BY "case", fullgraph'):
        full = store.get_run(handle, run["id"])
        keys = {
            table: sorted(item["key"] for item in full[table])
            for table in ("graph_breaks", "recompiles", "hidden_errors")
        }
        frames = sorted((f["compile_id"], f["co_name"], f["fail_type"]) for f in full["frames"])
        counts = (run["graph_break_count"], run["recompile_count"], run["hidden_error_count"], run["tokens_equal"])
        found.append((run["case"], run["fullgraph"], run["status"], run["error_type"], counts, keys, frames))
    return found


def test_the_built_in_cases_give_the_same_records_forked_from_a_parent_and_as_a_process_each(tmp_path):
    cases = [
        arg
        for name in ("append_last", "dynamic_slice", "hf_static_cache", "hf_dynamic_cache")
        for arg in ("--case", name)
    ]
    common = [*cases, "--backend", "eager", "--no-timing", "--new-tokens", "3", "--prompt-length", "6", "--jobs", "2"]
    forked, alone = tmp_path / "forked.db", tmp_path / "alone.db"
    diag("run", *common, "--db", str(forked), cwd=tmp_path)
    diag("run", *common, "--db", str(alone), cwd=tmp_path, env_extra={"DIAG_PROBE_PARENT": "0"})
    assert all(launch["available"] for launch in _launches(forked)), _launches(forked)
    assert {launch["detail"] for launch in _launches(alone)} == {"a process of its own (DIAG_PROBE_PARENT=0)"}
    assert len(_findings(forked)) == 8
    assert _findings(forked) == _findings(alone)


def test_what_a_run_changes_never_reaches_the_next_run(tmp_path):
    db = tmp_path / "state.db"
    diag("run", "--case", str(TEST_CASES / "leaves_state.py"), *small(), "--repeat", "3", "--db", str(db), cwd=tmp_path)
    handle = store.open_db(db)
    notes = [r["case_note"] for r in handle.query("SELECT case_note FROM runs ORDER BY id")]
    assert len(notes) == 3 and len(set(notes)) == 1, notes
    assert "DIAG_TEST_LEFT None" in notes[0] and "memory held 0" in notes[0] and "float32" in notes[0], notes[0]
    assert "mkldnn True" in notes[0] and "cudnn deterministic False" in notes[0], notes[0]
    assert all(launch["available"] for launch in _launches(db))


def _processes_of(marker: str) -> list[str]:
    listing = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in listing.splitlines() if "diag.probe" in line and marker in line]


def _parent_pid(marker: str, deadline_s: float = 120) -> int:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        # the parent and the run it forked: ps shows a forked child with its parent's arguments
        serving = sorted(int(line.split()[0]) for line in _processes_of(marker) if " serve " in line)
        if len(serving) >= 2:
            return serving[0]
        time.sleep(0.2)
    raise AssertionError(f"no probe parent with a run in {marker}: {_processes_of(marker)}")


def test_a_killed_parent_fails_only_its_running_run_and_the_matrix_goes_on_without_it(tmp_path):
    """The parent killed outright while a run hangs: that run dies with it (its lifeline), is stored
    as killed, and the runs after it are each a process of their own, saying why."""
    db = tmp_path / "p.db"
    process = subprocess.Popen(
        [sys.executable, "-m", "diag", "run", "--case", str(TEST_CASES / "hang.py"), "--case", "append_last"]
        + [*small(fullgraph=True), "--timeout", "600", "--db", str(db), "--json"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        parent = _parent_pid(str(tmp_path))
        time.sleep(3)  # inside the hanging compiled pass by now
        os.kill(parent, signal.SIGKILL)
        out, err = process.communicate(timeout=300)
    finally:
        process.kill()
    assert process.returncode == 0, err[-3000:]
    recorded = {r["case"]: r for r in json.loads(out)}
    assert recorded["hang"]["status"] == "crash" and recorded["append_last"]["status"] == "pass"
    launches = {
        r["case"]: json.loads(r["capabilities"])["probe_process"] for r in store.open_db(db).query("SELECT * FROM runs")
    }
    assert launches["hang"]["available"] is True
    assert launches["append_last"]["detail"].startswith("a process of its own (the probe parent ended"), launches
    assert _processes_of(str(tmp_path)) == []


def test_a_killed_orchestrator_takes_the_parent_and_its_runs_with_it(tmp_path):
    db = tmp_path / "o.db"
    process = subprocess.Popen(
        [sys.executable, "-m", "diag", "run", "--case", str(TEST_CASES / "hang.py"), "--case", "append_last"]
        + [*small(), "--timeout", "600", "--db", str(db)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _parent_pid(str(tmp_path))
    time.sleep(3)
    process.send_signal(signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 15
    while _processes_of(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_of(str(tmp_path)) == []


def test_a_parent_stopped_by_its_case_is_killed_and_every_finished_run_is_stored(tmp_path):
    """The case SIGSTOPs the parent it was forked from: it can neither report the run (which passed)
    nor fork the next. Within the answer limit the parent is killed, the run is read from /proc and
    stored as it ended, the next runs are processes of their own, and nothing is left behind."""
    db = tmp_path / "s.db"
    marker = tmp_path / "stopped-parent"
    done = diag(
        "run",
        "--case",
        str(TEST_CASES / "stops_parent.py"),
        "--case",
        "append_last",
        *small(),
        "--repeat",
        "2",
        "--timeout",
        "300",
        "--db",
        str(db),
        "--json",
        cwd=tmp_path,
        timeout=600,
        env_extra={"DIAG_TEST_STOP_MARKER": str(marker)},
    )
    assert marker.exists(), "the case never found its parent"
    stored = json.loads(done.stdout)
    assert len(stored) == 4 and {r["status"] for r in stored} == {"pass"}, [(r["case"], r["status"]) for r in stored]
    details = [launch["detail"] for launch in _launches(db)]
    assert any("did not report run" in detail for detail in details), details
    stopped = int(marker.read_text())
    assert not os.path.exists(f"/proc/{stopped}") or open(f"/proc/{stopped}/stat").read().split()[2] in "ZX"
    assert _processes_of(str(tmp_path)) == []
