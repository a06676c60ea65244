"""Faults, concurrency and hostile input never lose or mislabel data (real processes, real SQLite)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, TEST_CASES, diag, run_section
from factories import run_record, small, stored

from diag import store, text
from diag.build import identity

FAST = small()


def default_stop_signals() -> None:
    """In a child, before it runs: SIGINT, SIGTERM and SIGHUP at their default disposition."""
    for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, signal.SIG_DFL)


def _probe_processes(marker: str) -> list[str]:
    done = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True)
    return [line for line in done.stdout.splitlines() if "diag.probe" in line and marker in line]


@pytest.mark.slow
@pytest.mark.parametrize(
    "stop, code, said",
    [
        (signal.SIGINT, 130, "interrupted: 1 of 2 runs recorded"),
        # what CI runners, Slurm and Kubernetes send first, and a closed terminal: the same as Ctrl-C
        (signal.SIGTERM, 143, "interrupted by SIGTERM: 1 of 2 runs recorded"),
        (signal.SIGHUP, 129, "interrupted by SIGHUP: 1 of 2 runs recorded"),
    ],
)
def test_a_stopped_matrix_kills_probes_keeps_finished_runs_and_leaves_nothing_behind(tmp_path, stop, code, said):
    db = tmp_path / "int.db"
    temp = tmp_path / "tmp"  # the cold inductor caches and every other temporary folder go here
    temp.mkdir()
    # A job a non-interactive shell starts in the background inherits SIGINT ignored (and one started
    # under nohup SIGHUP), and Python then installs no handler for it: the test gives diag the default
    # disposition of every stop signal, as a user's interactive shell does, whatever the test run inherited.
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "diag",
            "run",
            "--case",
            "append_last",
            "--case",
            str(TEST_CASES / "hang.py"),
            *FAST,
            "--db",
            str(db),
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(temp)},
        preexec_fn=default_stop_signals,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if db.exists() and store.open_db(db)["runs"].count == 1 and _probe_processes(str(tmp_path)):
            break
        time.sleep(0.5)
    else:
        process.kill()
        pytest.fail("the first run never finished")
    time.sleep(3)  # the hang case is now inside its probe
    process.send_signal(stop)
    out, err = process.communicate(timeout=120)
    assert process.returncode == code, err[-2000:]
    assert said in err and "Traceback" not in err
    assert _probe_processes(str(tmp_path)) == []
    handle = store.open_db(db)
    assert [r["case"] for r in handle.query('SELECT "case" FROM runs')] == ["append_last"]
    assert store.integrity(handle) == "ok"
    # The killed run left no directory behind: one directory, the stored run's; and no temporary folder.
    stored = [r["uid"] for r in handle.query("SELECT uid FROM runs")]
    assert [p.name for p in (tmp_path / "int.runs").iterdir()] == stored
    assert [p.name for p in temp.iterdir() if p.name.startswith("diag-")] == []


def _python(script: str, cwd: Path) -> subprocess.CompletedProcess:
    """``script`` in a new interpreter, its stop signals at their defaults."""
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=cwd,
        preexec_fn=default_stop_signals,
        timeout=120,
    )


def test_a_stop_signal_while_a_finished_command_exits_leaves_its_exit_status(tmp_path):
    """SIGTERM that lands after the command has ended, while the process exits (a CI runner's timeout
    at the wrong moment): the process reports the command's outcome, not a death by signal."""
    script = (
        "import os, signal, sys\n"
        "from diag.cli import main\n"
        "real_exit = sys.exit\n"
        "def exit_after_a_stop(code=0):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    real_exit(code)\n"
        "sys.exit = exit_after_a_stop\n"
        "sys.argv = ['diag', 'cases']\n"
        "main()\n"
    )
    done = _python(script, tmp_path)
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert "append_last" in done.stdout and "Traceback" not in done.stderr


def test_a_stop_signal_inside_python_s_own_machinery_is_a_stop_not_a_traceback(tmp_path):
    """SIGTERM that lands while a class is being made (an import in the middle of a command: numpy's
    finfo, seen in an export stopped at 0.1 s): Python wraps the stop in RuntimeError("Error calling
    __set_name__ ..."). The command still ends as stopped, in one line, with 128 + the signal."""
    script = (
        "import os, signal, sys\n"
        "from diag import store\n"
        "class Late:\n"
        "    def __set_name__(self, owner, name):\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "def recent_runs(*args, **kwargs):\n"
        "    class Holder:  # a class made as the signal lands: what an import does\n"
        "        late = Late()\n"
        "    return []\n"
        "store.recent_runs = recent_runs\n"
        "sys.argv = ['diag', 'runs', '--db', 'h.db']\n"
        "from diag.cli import main\n"
        "main()\n"
    )
    stored(str(tmp_path / "h.db"), run_record())
    done = _python(script, tmp_path)
    assert done.returncode == 128 + signal.SIGTERM, (done.returncode, done.stderr)
    assert done.stderr.strip() == "Aborted by SIGTERM.", done.stderr


@pytest.mark.slow
def test_two_concurrent_writers_keep_every_run_once(tmp_path):
    db = tmp_path / "shared.db"
    command = [
        sys.executable,
        "-m",
        "diag",
        "run",
        "--case",
        "append_last",
        "--case",
        "dynamic_slice",
        *FAST,
        "--db",
        str(db),
        "--json",
    ]
    first = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outputs = [p.communicate(timeout=900) for p in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, outputs
    uids = [run["uid"] for out, _ in outputs for run in json.loads(out)]
    assert len(uids) == 4
    handle = store.open_db(db)
    stored = [row["uid"] for row in handle.query("SELECT uid FROM runs")]
    assert sorted(stored) == sorted(uids)
    assert store.integrity(handle) == "ok"


def test_old_schema_fixture_is_migrated_in_place(tmp_path):
    """tests/fixtures/schema_v1.db was written by diag with only migration m001 (see tests/fixtures/README)."""
    path = tmp_path / "v1.db"
    shutil.copy(REPO / "tests" / "fixtures" / "schema_v1.db", path)
    raw = sqlite3.connect(path)
    assert [r[0] for r in raw.execute("SELECT name FROM migrations")] == ["m001_initial"]
    runs_before = raw.execute('SELECT id, "case", status FROM runs').fetchall()
    raw.close()
    db = store.open_db(path)
    assert [r["name"] for r in db.query("SELECT name FROM migrations")] == [n for n, _ in store.MIGRATIONS]
    assert "latest_status" in db.view_names()
    assert [tuple(r.values()) for r in db.query('SELECT id, "case", status FROM runs')] == runs_before


HOSTILE = "<script>alert(1)</script> \x1b[2J\x1b[31mred\x00nul " + "x" * 20000 + " \udcff\udcfe"


def test_hostile_strings_are_stored_and_readable_in_the_terminal(tmp_path):
    db = store.open_db(tmp_path / "h.db")
    record = run_record(
        build=identity("2.13.0", "abc", None),
        hidden_errors=[{"key": "k", "exc_type": "E", "message": HOSTILE, "count": 1}],
        uid="h",
        case="\x1b]0;title\x07case",
        status="compile_error",
        error_type="RuntimeError",
        error_message=HOSTILE,
    )
    run_id = stored(db, record)
    run = store.get_run(db, run_id)
    assert run["error_message"].startswith("<script>alert(1)</script> \x1b[2J")
    assert "\x00nul" in run["error_message"] and "x" * 20000 in run["error_message"]
    assert run["error_message"].endswith("\\udcff\\udcfe")
    done = diag("show", str(run_id), "--db", str(tmp_path / "h.db"), cwd=tmp_path)
    assert "\x1b" not in done.stdout and "\x00" not in done.stdout and "\x07" not in done.stdout
    assert "\\x1b[2J" in done.stdout
    assert "\x1b" not in text.safe(HOSTILE)


def test_missing_artifacts_do_not_lose_the_run(findings_db, tmp_path):
    """A run directory that was deleted or replaced by a file: show and report still work."""
    work = tmp_path / "copy"
    work.mkdir()
    db_path = work / "findings.db"
    handle = store.open_db(findings_db)
    handle.conn.execute("PRAGMA wal_checkpoint(FULL)")
    shutil.copy(findings_db, db_path)
    db = store.open_db(db_path)
    first, second = [r["id"] for r in db.query("SELECT id FROM runs ORDER BY id LIMIT 2")]
    gone, corrupted = tmp_path / "gone", tmp_path / "corrupted"
    corrupted.write_text("not a directory")
    db.conn.execute("UPDATE runs SET artifacts_dir = ? WHERE id = ?", [str(gone), first])
    db.conn.execute("UPDATE runs SET artifacts_dir = ? WHERE id = ?", [str(corrupted), second])
    db.conn.commit()
    shown = json.loads(diag("show", str(first), "--db", str(db_path), "--json", cwd=work).stdout)
    assert shown["artifacts"] == {}
    diag("report", "--db", str(db_path), "--out", str(work / "site"), cwd=work)
    assert "No artifacts found" in run_section(work / "site", second)


@pytest.mark.slow
def test_debug_log_on_a_full_disk_does_not_stop_the_compile(tmp_path):
    """/dev/full fails every write with ENOSPC, as a full disk does."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    code = """
import logging, torch
from pathlib import Path
from diag.probe.capture import LogCapture
capture = LogCapture(Path('/dev/full'), lambda: 0)
capture.install()
try:
    out = torch.compile(lambda x: torch.sin(x) + 1, backend='eager')(torch.ones(3))
finally:
    capture.uninstall()
print(float(out.sum()), len(capture.parser_errors) > 0, capture.record_count > 0)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    total, noted, captured = done.stdout.split()
    assert abs(float(total) - 3 * (1 + 0.8414709848)) < 1e-4
    assert noted == "True" and captured == "True"


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP])
def test_a_probe_stopped_by_a_signal_takes_its_passes_with_it(tmp_path, stop):
    """A scheduler may signal the probe itself, with no orchestrator left to kill its group (Slurm
    signals every process of a job step): the probe's passes and compile workers go with it."""
    from diag import envs
    from diag.contract import Config
    from diag.run import catalog, runner

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    job = runner.Job(
        envs.resolve(envs.parse_spec("current")),
        catalog.resolve([str(TEST_CASES / "hang.py")])[0],
        Config(backend="eager", new_tokens=3, prompt_length=6),
    )
    spec = runner.write_spec(job, run_dir, False, None)
    probe = subprocess.Popen(
        [*job.env.probe_command("run", "--spec", str(spec), "--dir", str(run_dir), "--timeout", "300", "--no-timing")],
        env=job.env.probe_environ(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=default_stop_signals,  # a test run started under nohup must not hand the probe SIGHUP ignored
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(_probe_processes(str(tmp_path))) < 2:
        time.sleep(0.5)  # the probe and its diagnosis pass, forked from it
    assert len(_probe_processes(str(tmp_path))) == 2
    time.sleep(2)
    probe.send_signal(stop)
    probe.wait(timeout=60)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _probe_processes(str(tmp_path)):
        time.sleep(0.2)
    left = _probe_processes(str(tmp_path))
    for line in left:
        os.kill(int(line.split()[0]), signal.SIGKILL)
    assert left == []


@pytest.mark.slow
def test_a_case_that_prints_without_end_keeps_the_head_and_tail_of_its_output(tmp_path):
    db = tmp_path / "chatty.db"
    diag("run", "--case", str(TEST_CASES / "chatty.py"), *FAST, "--db", str(db), cwd=tmp_path)
    (run,) = store.open_db(db).query("SELECT status, artifacts_dir FROM runs")
    assert run["status"] == "pass"
    folder = Path(run["artifacts_dir"])
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert size < 12 * 2**20, size  # it printed 12 MB a stream at each of its generations (eager, compiled)
    for stream in ("stdout", "stderr"):
        kept = (folder / f"diagnose.{stream}.txt").read_text()
        assert "bytes of this output dropped here" in kept and kept.startswith("x" * 1023)
