"""The one rule for every path diag writes (diag/cli/checks.py): never one of the command's inputs,
never an SQLite database, never through a symbolic link it did not make, with the permissions of a
normal file or folder. Each refusal is one line, before anything is written; the inputs are unchanged."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest
from conftest import diag_here
from test_cli_input import assert_one_line_error


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _listing(folder: Path) -> dict[str, str]:
    """Every file's content under ``folder``; SQLite's shared-memory index and an empty write-ahead log
    aside (a reader makes and rewrites them)."""
    return {
        str(p.relative_to(folder)): (_digest(p) if p.is_file() else "")
        for p in sorted(folder.rglob("*"))
        if not p.name.endswith("-shm") and not (p.name.endswith("-wal") and p.stat().st_size == 0)
    }


@pytest.fixture
def history(copied_db: Path) -> Path:
    """A recorded history in a folder of its own, with a matrix file and a text file beside it."""
    (copied_db.parent / "m.toml").write_text('[[part]]\nrun = "--case append_last --backend eager"\n')
    (copied_db.parent / "notes.txt").write_text("mine\n")
    return copied_db


def _refused_untouched(folder: Path, *args: str, said: str) -> None:
    before = _listing(folder)
    done = diag_here(*args, cwd=folder)
    assert_one_line_error(done, said)
    assert _listing(folder) == before


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--db", "copy.db", "--junit", "copy.db"],
        ["check", "--db", "copy.db", "--alerts", "./copy.db"],
        ["plan", "--part", "--case append_last", "--shards", "1", "--out", "copy.db"],
        ["plan", "--part", "--case append_last", "--shards", "1", "--history", "copy.db", "--out", "copy.db"],
        ["repro", "1", "--db", "copy.db", "-o", "copy.db"],
    ],
    ids=["check-junit", "check-alerts", "plan-out", "plan-history", "repro-o"],
)
def test_an_output_that_is_the_history_is_refused(history, args):
    _refused_untouched(history.parent, *args, said="copy.db")


def test_an_output_that_is_another_input_is_refused_whatever_its_spelling(history):
    folder = history.parent
    _refused_untouched(
        folder, "plan", "--matrix", "m.toml", "--shards", "1", "--out", f"../{folder.name}/m.toml", said="--matrix"
    )
    _refused_untouched(
        folder, "check", "--db", "copy.db", "--allow", "notes.txt", "--junit", "notes.txt", said="--allow"
    )


def test_an_sqlite_file_that_is_not_an_input_is_never_written_over(history):
    other = history.parent / "other.db"
    other.write_bytes(history.read_bytes())
    _refused_untouched(history.parent, "check", "--db", "copy.db", "--junit", "other.db", said="SQLite database")


def test_repro_never_writes_over_the_case_file_of_its_run(tmp_path, copied_db):
    from diag import store

    case = tmp_path / "my_case.py"
    case.write_text("# a case file\n")
    handle = store.open_db(copied_db)
    with handle.conn:
        handle.conn.execute("UPDATE runs SET case_path = ? WHERE id = 1", (str(case),))
    handle.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    handle.conn.close()
    _refused_untouched(tmp_path, "repro", "1", "--db", "copy.db", "-o", "my_case.py", said="case file")


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--db", "copy.db", "--junit", "link"],
        ["plan", "--part", "--case append_last", "--shards", "1", "--out", "link"],
        ["report", "--db", "copy.db", "--out", "link"],
        ["export", "--db", "copy.db", "--out", "link"],
    ],
    ids=["junit", "plan", "report", "export"],
)
def test_an_output_through_a_symbolic_link_is_refused(history, args):
    folder = history.parent
    target = folder / "elsewhere"
    target.mkdir()
    (folder / "link").symlink_to(target if args[0] in ("report", "export") else folder / "notes.txt")
    _refused_untouched(folder, *args, said="symbolic link")


def test_export_of_the_folder_it_runs_in_is_refused_and_nothing_is_left_beside_it(history):
    pytest.importorskip("pyarrow")
    folder = history.parent / "ex"
    folder.mkdir()
    assert diag_here("export", "--db", str(history), "--out", str(folder), cwd=history.parent).returncode == 0
    parent_before = _listing(history.parent)
    _refused_untouched(folder, "export", "--db", str(history), "--out", ".", said="the folder diag runs in")
    assert _listing(history.parent) == parent_before


def test_an_export_is_readable_as_a_normal_folder_is(history):
    pytest.importorskip("pyarrow")
    umask = os.umask(0o022)
    try:
        assert diag_here("export", "--db", "copy.db", "--out", "ex", cwd=history.parent).returncode == 0
    finally:
        os.umask(umask)
    mode = stat.S_IMODE((history.parent / "ex").stat().st_mode)
    assert mode == 0o755, oct(mode)


def test_an_export_that_cannot_replace_the_earlier_one_leaves_nothing_beside_it(history):
    """The earlier export cannot be moved (its folder nothing may write: an immutable folder, as root
    is refused nothing else): one line, the earlier export as it was, no hidden folder beside it."""
    pytest.importorskip("pyarrow")
    folder = history.parent
    assert diag_here("export", "--db", "copy.db", "--out", "ro", cwd=folder).returncode == 0
    os.chmod(folder / "ro", 0o555)
    immutable = os.geteuid() == 0 and os.system(f"chattr +i {folder / 'ro'} 2>/dev/null") == 0
    if os.geteuid() == 0 and not immutable:
        pytest.skip("root, and chattr +i is not available here: nothing makes the folder unwritable")
    try:
        before = _listing(folder)
        done = diag_here("export", "--db", "copy.db", "--out", "ro", cwd=folder)
        assert_one_line_error(done)
        assert _listing(folder) == before
        assert [name for name in os.listdir(folder) if name.startswith(".")] == []
    finally:
        if immutable:
            os.system(f"chattr -i {folder / 'ro'}")
        os.chmod(folder / "ro", 0o755)
