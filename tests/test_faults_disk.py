"""Full disks, read-only and damaged databases, and a killed orchestrator: one line, nothing lost, no orphan.

Real faults: tmpfs mounts of a few MB for full disks, ``chattr +i`` for files nothing may
write (root ignores plain permissions), bytes overwritten in a real SQLite file, a real
SIGKILL. The mounts and chattr need root (CI runs as root); elsewhere these tests skip.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, TEST_CASES, cli, recorded, replay
from factories import small

from diag import store

ROOT = os.geteuid() == 0 and shutil.which("mount") and shutil.which("chattr")
pytestmark = pytest.mark.skipif(not ROOT, reason="mounting tmpfs and chattr +i need root")
FAST = small()


@contextlib.contextmanager
def tmpfs(where: Path, size: str):
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@contextlib.contextmanager
def immutable(*paths: Path):
    for path in paths:
        subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield
    finally:
        for path in paths:
            subprocess.run(["chattr", "-i", str(path)], check=False)


def fill(folder: Path, leave: int = 0) -> None:
    """Fill the file system of ``folder``, then give back ``leave`` bytes of it."""
    with open(folder / "filler", "ab") as handle:
        with contextlib.suppress(OSError):
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        if leave:
            handle.truncate(max(0, handle.tell() - leave))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_db(tmp_path: Path, name: str = "one.db") -> Path:
    """A DB of one recorded run, with no connection left open (and so no -wal or -shm beside it)."""
    db = tmp_path / name
    replay([recorded("append_last-fullgraph", tmp_path / f"{name}.runs")], db)
    gc.collect()  # the replay's connection, held in a reference cycle
    opened = store.open_db(db)
    opened.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    opened.conn.close()
    return db


def diag_main(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "diag", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def assert_one_line(done: subprocess.CompletedProcess, *fragments: str) -> None:
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, done.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_a_read_only_db_is_read_but_never_written(tmp_path):
    db = one_db(tmp_path)
    before = digest(db)
    with immutable(db):
        listed = cli("runs", "--db", str(db), "--json")
        assert listed.exit_code == 0 and len(json.loads(listed.stdout)) == 1
        assert cli("report", "--db", str(db), "--out", str(tmp_path / "site")).exit_code == 0
        done = diag_main("run", "--case", "append_last", *FAST, "--db", str(db), cwd=tmp_path)
        assert_one_line(done, "read-only")
        assert "running" not in done.stderr  # refused before any probe started
        done = diag_main("merge", str(db), str(one_db(tmp_path, "other.db")), cwd=tmp_path)
        assert_one_line(done, "read-only")
    assert digest(db) == before
    assert len(list((tmp_path / "one.db.runs").iterdir())) == 1


def test_merge_reads_shards_without_writing_them_even_of_an_old_schema(tmp_path):
    shard, old = one_db(tmp_path, "shard.db"), tmp_path / "old.db"
    shutil.copy(REPO / "tests" / "fixtures" / "schema_v1.db", old)
    before = digest(shard), digest(old)
    with immutable(shard, old):
        done = cli("merge", str(tmp_path / "history.db"), str(shard), str(old), "--json")
        assert done.exit_code == 0, done.output
        assert [s["added"] for s in json.loads(done.stdout)] == [1, 1]
    assert (digest(shard), digest(old)) == before


def test_a_damaged_shard_is_refused_and_the_history_is_untouched(tmp_path):
    history, shard = one_db(tmp_path, "history.db"), one_db(tmp_path, "shard.db")
    data = bytearray(shard.read_bytes())
    page = 4096
    assert len(data) > 4 * page
    data[2 * page : len(data) - page] = os.urandom(len(data) - 3 * page)
    shard.write_bytes(bytes(data))
    before = store.table_counts(store.open_db(history))
    done = diag_main("merge", str(history), str(shard), cwd=tmp_path)
    assert_one_line(done, "shard.db", "damaged")
    assert store.table_counts(store.open_db(history)) == before
    assert store.integrity(store.open_db(history)) == "ok"


def test_a_folder_nothing_may_be_created_in(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    with immutable(folder):
        done = diag_main("run", "--case", "append_last", *FAST, "--db", "x.db", cwd=folder)
        assert_one_line(done, "cannot create database x.db", "not writable")
        done = diag_main("merge", "x.db", str(one_db(tmp_path)), cwd=folder)
        assert_one_line(done, "not writable")
    assert list(folder.iterdir()) == []


def test_a_full_disk_before_the_run_leaves_no_file(tmp_path):
    with tmpfs(tmp_path / "small", "2m") as disk:
        done = diag_main("run", "--case", "append_last", *FAST, "--db", str(disk / "x.db"), cwd=tmp_path)
        assert_one_line(done, "is full")
        fill(disk)
        with pytest.raises(store.StoreError, match="full"):
            store.open_db(disk / "y.db")
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]


@pytest.mark.slow
def test_a_disk_that_fills_during_the_run_is_one_line_and_leaves_no_orphan(tmp_path):
    with tmpfs(tmp_path / "disk", "64m") as disk:
        db = disk / "x.db"
        store.open_db(db)
        done = diag_main(
            "run",
            "--case",
            str(TEST_CASES / "fill_disk.py"),
            *FAST,
            "--db",
            str(db),
            cwd=tmp_path,
            env={"DIAG_FILL_PATH": str(disk / "filler")},
        )
        # Caught writing the run directory, or at the final save: either way one line naming the fault.
        assert_one_line(done)
        assert "No space left on device" in done.stderr or "is full" in done.stderr
        (disk / "filler").unlink()
        handle = store.open_db(db)
        assert handle["runs"].count == 0 and store.integrity(handle) == "ok"
        assert list((disk / "x.runs").iterdir()) == []


def _probes_of(marker: str) -> list[str]:
    listing = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in listing.splitlines() if "diag.probe" in line and marker in line]


@pytest.mark.slow
def test_probes_die_with_a_killed_orchestrator(tmp_path):
    db = tmp_path / "orphans.db"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "diag",
            "run",
            "--case",
            str(TEST_CASES / "hang.py"),
            *FAST,
            "--timeout",
            "600",
            "--db",
            str(db),
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not _probes_of(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _probes_of(str(tmp_path)), "the probe never started"
    time.sleep(3)  # inside the hanging compiled pass by now
    process.send_signal(signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 15
    while _probes_of(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _probes_of(str(tmp_path)) == []


@pytest.mark.slow
def test_a_full_temp_folder_is_a_tool_error_not_a_compile_error(tmp_path):
    """Inductor writes its kernels under $TMPDIR; a full one is the machine's fault, never stored as torch's.
    A few KB are left: Python takes a $TMPDIR it cannot write a file in for /tmp (as diag's own temporary
    folder, the timed run's cold cache, would then be), so the fault would never reach the compile."""
    with tmpfs(tmp_path / "tmp", "1m") as temp:
        fill(temp, leave=128 * 1024)
        db = tmp_path / "t.db"
        done = diag_main(
            "run",
            "--case",
            "append_last",
            "--fullgraph",
            "--backend",
            "inductor",
            "--new-tokens",
            "3",
            "--prompt-length",
            "6",
            "--repeats",
            "1",
            "--timing-seconds",
            "0",
            "--db",
            str(db),
            cwd=tmp_path,
            env={"TMPDIR": str(temp)},
        )
        assert_one_line(done, "No space left on device", "nothing stored for it")
    assert store.open_db(db)["runs"].count == 0
    assert list((tmp_path / "t.runs").iterdir()) == []


def test_a_db_in_a_folder_nothing_may_be_written_is_read_and_a_write_names_the_folder(tmp_path):
    """As a user without write access to the DB's folder: root cannot be refused by permissions, so
    the folder is made immutable. SQLite cannot create the -shm a WAL reader needs there."""
    folder = tmp_path / "shared"
    folder.mkdir()
    db = one_db(folder)
    before = digest(db)
    with immutable(folder):
        for args in (["runs"], ["show", "1"], ["check"], ["compare", "1", "1"], ["repro", "1"]):
            done = diag_main(*args, "--db", str(db), cwd=tmp_path)
            assert done.returncode in (0, 3) and "Error" not in done.stderr, (args, done.stderr)
        done = diag_main("report", "--db", str(db), "--out", str(tmp_path / "site"), cwd=tmp_path)
        assert done.returncode == 0 and (tmp_path / "site" / "index.html").exists(), done.stderr
        for args in (["run", "--case", "append_last", *FAST], ["prune"], ["merge", str(db), str(one_db(tmp_path))]):
            if args[0] == "merge":
                done = diag_main(*args, cwd=tmp_path)
            else:
                done = diag_main(*args, "--db", str(db), cwd=tmp_path)
            assert_one_line(done, f"its folder {folder} is not writable", "journal")
    assert digest(db) == before and sorted(p.name for p in folder.iterdir()) == ["one.db", "one.db.runs"]


def test_race_into_a_read_only_db_refuses_before_it_races(tmp_path):
    """As run and merge do: the DB is refused before the environment is even asked what torch it has
    (--torch /bin/true would be refused after that, in other words)."""
    db = one_db(tmp_path)
    with immutable(db):
        done = diag_main(
            "race", "--case", "append_last", "--case", "dynamic_slice", "--torch", "/bin/true", "--db", str(db),
            cwd=tmp_path,
        )  # fmt: skip
    assert_one_line(done, "read-only")


def test_prune_of_a_read_only_db_says_so_as_run_and_merge_do(tmp_path):
    db = one_db(tmp_path)
    with immutable(db):
        assert_one_line(diag_main("prune", "--db", str(db), cwd=tmp_path), "read-only", "not add runs")


def test_a_full_disk_under_an_existing_db_says_full_and_leaves_no_torn_journal(tmp_path):
    with tmpfs(tmp_path / "disk", "4m") as disk:
        db = disk / "history.db"
        shutil.copy(one_db(tmp_path), db)
        fill(disk)
        done = diag_main("merge", str(db), str(one_db(tmp_path, "shard.db")), cwd=tmp_path)
        assert_one_line(done, "is full")
        assert "disk I/O error" not in done.stderr.split("(")[0]
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "history.db"]  # no -wal, no 3-byte -shm
        (disk / "filler").unlink()
        assert len(json.loads(cli("runs", "--db", str(db), "--json").stdout)) == 1


def test_a_run_whose_run_directories_cannot_be_created_is_refused_before_it_starts(tmp_path):
    """The DB itself takes writes (its -wal is there: a writer holds it open), but nothing may be
    created beside it: the run directories could not be written, so no probe starts."""
    folder = tmp_path / "held"
    folder.mkdir()
    db = one_db(folder)
    holder = store.open_db(db)  # keeps the -wal and -shm in place
    holder.conn.execute("SELECT count(*) FROM runs").fetchone()
    try:
        with immutable(folder):
            done = diag_main("run", "--case", "append_last", *FAST, "--db", str(db), cwd=tmp_path)
            assert_one_line(done, "run directories", "not writable")
            assert "running" not in done.stderr
    finally:
        holder.conn.close()


def test_export_into_a_folder_that_cannot_be_written_is_one_line_and_leaves_nothing(tmp_path):
    db = one_db(tmp_path)
    parent = tmp_path / "locked"
    parent.mkdir()
    with immutable(parent):
        done = diag_main("export", "--db", str(db), "--out", str(parent / "exp"), cwd=tmp_path)
    assert_one_line(done, "locked")
    assert list(parent.iterdir()) == []
