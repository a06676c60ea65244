"""Every command and every option of ``diag --help``, given hostile values: no traceback, a refusal in
one line, no file made beside the inputs, no DB changed, and nothing started for a value that is
never valid (bytes that are not UTF-8, a FIFO, a loop of symbolic links, a device, a folder where a
file goes).

Each (command, option, value) runs through diag's entry point in this process, on a copy of a recorded
history, in a folder of its own holding the hostile files. What would start real work (a subprocess:
a probe, pip, a target interpreter; a network request) raises ``StartedWork`` instead: the value
passed every check at the edge. That is the one stand-in here, and it stands in for work, not for any
check of the input. A value that is fine for one option (an empty --with) may start work; one that is
never valid must be refused before it does. A second test draws values from hypothesis.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import io
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diag import stopping
from diag.cli import cli, main

pytestmark = pytest.mark.slow

NOT_UTF8 = os.fsdecode(b"\xff\xfe-not-utf8")
WRITERS = {"run", "race", "merge", "prune", "bisect", "backfill", "env add"}

# A quick, valid invocation of each command (DB is the recorded history, OUT a folder it may write).
BASE: dict[str, list[str]] = {
    "backfill": ["--from", "2023-06-01", "--to", "2023-06-02", "--part", "--case all --backend eager", "--dry-run"],
    "bisect": ["--case", "append_last", "--good", "2.1.0.dev20230601", "--bad", "2.1.0.dev20230603"],
    "cases": [],
    "changes": [],
    "check": [],
    "compare": ["1", "2"],
    "env add": ["2.13.0"],
    "env-diff": ["1", "2"],
    "env list": [],
    "env rm": ["nope"],
    "expect": ["OUT/counts.json"],
    "export": ["--out", "OUT/export"],
    "file-upstream": ["1"],
    "merge": ["OUT/merged.db", "DB"],
    "plan": ["--shards", "2", "--part", "--case all --backend eager", "--out", "OUT/plan.json"],
    "prune": [],
    "race": ["--case", "append_last", "--case", "dynamic_slice"],
    "report": ["--out", "OUT/site"],
    "repro": ["1", "-o", "OUT/repro.py"],
    "run": ["--case", "append_last", "--backend", "eager"],
    "runs": [],
    "show": ["1"],
    "statuses": [],
}

# What is never a valid value of a path option, and so must be refused before anything starts.
NEVER_A_PATH = ["fifo", "loop1", "/dev/full", NOT_UTF8]
# What an output may never be (diag/cli/checks.py): the history itself, a symbolic link.
NEVER_AN_OUTPUT = ["history.db", "link"]
PATH_VALUES = ["", "folder", "text.txt", "missing/deeper/x.db", "x%41?mode=rw#.db", *NEVER_AN_OUTPUT, *NEVER_A_PATH]
NUMBER_VALUES = ["", "-1", "99999999999999999999999", "1e400", "nan", "inf", NOT_UTF8]
CHOICE_VALUES = ["", "bogus", NOT_UTF8]
TEXT_VALUES = [
    "",
    "x" * 5000,
    "--case 'all",
    "2.1.0.dev20230230",
    "9999-12-31",
    "$(touch pwned)",
    "../../etc/passwd",
    "fifo",
    "/dev/full",
    NOT_UTF8,
]


class StartedWork(BaseException):
    """A subprocess or a request was about to start: every check at the edge passed."""


class Hung(BaseException):
    """The command blocked (a FIFO opened for writing waits for a reader for ever)."""


def _started(*args: object, **kwargs: object) -> None:
    raise StartedWork


@dataclass
class Outcome:
    code: Optional[int]  # None: work started
    stderr: str


def _commands() -> dict[str, click.Command]:
    found = {}
    for name, command in cli.commands.items():
        if isinstance(command, click.Group):
            found.update({f"{name} {sub}": c for sub, c in command.commands.items()})
        else:
            found[name] = command
    return found


def _values(param: click.Parameter) -> list[str]:
    kind = param.type
    if isinstance(kind, click.Path):
        return PATH_VALUES
    if isinstance(kind, (click.IntRange, click.FloatRange)) or kind in (click.INT, click.FLOAT):
        return NUMBER_VALUES
    if isinstance(kind, click.Choice):
        return CHOICE_VALUES
    return TEXT_VALUES


def _cases() -> list[tuple[str, str, str]]:
    """(command, option or argument name, value) for every option taking a value and every argument."""
    found = []
    for name, command in sorted(_commands().items()):
        for param in command.params:
            if isinstance(param, click.Option) and (param.is_flag or param.count or "--help" in param.opts):
                continue
            label = param.opts[0] if isinstance(param, click.Option) else f"<{param.name}>"
            found += [(name, label, value) for value in _values(param)]
    return found


def _argv(command: str, label: str, value: str, db: str) -> list[str]:
    args = [db if word == "DB" else word for word in BASE[command]]
    params = _commands()[command].params
    if label.startswith("<"):  # a positional argument: the base's value of it replaced
        positions = [p.name for p in params if isinstance(p, click.Argument)]
        place = positions.index(label[1:-1])
        positional = [
            i for i, word in enumerate(args) if not word.startswith("-") and (i == 0 or not args[i - 1].startswith("-"))
        ]
        if place < len(positional):
            args[positional[place]] = value
        else:
            args.append(value)
    elif label in args:
        args[args.index(label) + 1] = value
    else:
        args += [label, value]
    if command != "merge" and any(p.opts[0] == "--db" for p in params if isinstance(p, click.Option)):
        if "--db" not in args:
            args += ["--db", db]
    return [*command.split(), *args]


@contextlib.contextmanager
def _no_work() -> Iterator[None]:
    saved = subprocess.Popen, urllib.request.urlopen
    subprocess.Popen, urllib.request.urlopen = _started, _started  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        subprocess.Popen, urllib.request.urlopen = saved  # type: ignore[misc]


def _hung(signum: int, frame: object) -> None:
    raise Hung


def _invoke(argv: list[str], cwd: Path) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    sys.argv = ["diag", *argv]
    os.chdir(cwd)
    previous = signal.signal(signal.SIGALRM, _hung)
    handlers = stopping.saved()  # main() lets stop signals go once its command ends; this process goes on
    signal.alarm(30)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _no_work():
            try:
                main()
                code: Optional[int] = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except StartedWork:
                code = None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        stopping.restore(handlers)
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        # as the process's end would: a DB left open closes (and takes its -wal with it). Only what this
        # invocation made is scanned (``frozen_heap``): a worker that imported torch has a heap a full
        # collection takes 0.2 s to walk, 270 s over the enumeration.
        gc.collect()
    return Outcome(code, err.getvalue())


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if not str(p.relative_to(folder)).startswith("OUT")}


@pytest.fixture(scope="module")
def workspace(recorded_db, tmp_path_factory) -> Path:
    """The hostile files, and the recorded history checkpointed into one file."""
    from diag import store

    store.open_db(recorded_db).conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    folder = tmp_path_factory.mktemp("fuzz-template")
    shutil.copy(recorded_db, folder / "history.db")
    (folder / "text.txt").write_text("hello\n")
    (folder / "folder").mkdir()
    return folder


@pytest.fixture(autouse=True)
def frozen_heap() -> Iterator[None]:
    """What the worker held before the test is set aside from the collector for its length."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _fresh(workspace: Path, into: Path) -> Path:
    into.mkdir(parents=True)
    shutil.copy(workspace / "history.db", into / "history.db")
    shutil.copy(workspace / "text.txt", into / "text.txt")
    (into / "folder").mkdir()
    os.mkfifo(into / "fifo")
    (into / "loop1").symlink_to("loop2")
    (into / "loop2").symlink_to("loop1")
    (into / "link").symlink_to("text.txt")
    (into / "OUT").mkdir()
    return into


def _check(command: str, label: str, value: str, work: Path) -> Outcome:
    db = work / "history.db"
    before_db, before_files = _digest(db), _listing(work)
    argv = _argv(command, label, value, str(db))
    outcome = _invoke(argv, work)
    said = (" ".join(map(repr, argv)), outcome)
    assert "Traceback" not in outcome.stderr, said
    if command == "check" and outcome.code == 1 and not outcome.stderr:
        outcome.code = 0  # the gate's verdict (a regression in the recorded history), not an error
    if outcome.code not in (0, None):
        lines = [line for line in outcome.stderr.splitlines() if line.strip()]
        assert outcome.code in (1, 2) and len(lines) == 1 and lines[0].startswith("Error: "), said
    if value in NEVER_A_PATH and (value == NOT_UTF8 or isinstance(_param(command, label).type, click.Path)):
        assert outcome.code in (1, 2), said  # refused, before anything started
    if value in NEVER_AN_OUTPUT and getattr(_param(command, label).type, "output", False):
        assert outcome.code in (1, 2), said  # never written over
    if command not in WRITERS:
        assert _digest(db) == before_db, said
    if outcome.code != 0 and not (command in WRITERS and outcome.code is None):
        assert _digest(db) == before_db, said
        assert _listing(work) == before_files, (said, _listing(work) ^ before_files)
    return outcome


def _param(command: str, label: str) -> click.Parameter:
    for param in _commands()[command].params:
        if (isinstance(param, click.Option) and param.opts[0] == label) or f"<{param.name}>" == label:
            return param
    raise KeyError(label)


def test_every_command_and_option_refuses_hostile_values_in_one_line(workspace, tmp_path):
    cases = _cases()
    assert {command for command, _, _ in cases} >= set(BASE) - {"cases", "env list", "statuses"}
    seen: dict[str, int] = {}
    for index, (command, label, value) in enumerate(cases):
        outcome = _check(command, label, value, _fresh(workspace, tmp_path / str(index)))
        kind = "started" if outcome.code is None else ("accepted" if outcome.code == 0 else "refused")
        seen[kind] = seen.get(kind, 0) + 1
        shutil.rmtree(tmp_path / str(index), ignore_errors=True)
    # the figure docs/reliability.md gives
    print(f"\n{len(cases)} (command, option, value) cases: {seen}")
    assert len(cases) > 1000 and seen.get("refused", 0) > len(cases) // 2


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(
    case=st.sampled_from(sorted({(command, label) for command, label, _ in _cases()})),
    value=st.one_of(
        st.text(min_size=0, max_size=40),
        st.binary(min_size=1, max_size=20).map(os.fsdecode),
        st.integers(min_value=-(10**30), max_value=10**30).map(str),
        st.sampled_from(TEXT_VALUES + PATH_VALUES + NUMBER_VALUES),
    ),
)
def test_drawn_values_never_raise_a_traceback_or_leave_a_file(workspace, tmp_path_factory, case, value):
    if "\x00" in value:  # no argument of a process can hold NUL
        value = value.replace("\x00", "")
    command, label = case
    work = tmp_path_factory.mktemp("drawn")
    work.rmdir()
    _check(command, label, value, _fresh(workspace, work))
    shutil.rmtree(work, ignore_errors=True)
