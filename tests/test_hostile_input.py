"""Hostile input to the newer commands (run and race's --torch, backfill, bisect, plan, merge,
file-upstream, export) and to any --db: one line on stderr, a non-zero exit, no traceback, and no file
made beside the inputs. Each case is one a user was seen to hit; the fuzz test (test_fuzz_cli.py)
sends many more of the same kinds."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest
from conftest import diag_here
from test_cli_input import assert_one_line_error


def _entries(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


@pytest.fixture
def work(tmp_path) -> Path:
    """A folder with the hostile files: a script that prints what is not a version, a text file, a
    FIFO and a loop of symbolic links."""
    script = tmp_path / "notver.sh"
    script.write_text("#!/bin/sh\necho hello world\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "text.txt").write_text("hello\n")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    return tmp_path


def _refused(work: Path, *args: str, fragments: tuple[str, ...] = ()) -> None:
    before = _entries(work)
    done = diag_here(*args, cwd=work)
    assert_one_line_error(done, *fragments)
    assert _entries(work) == before, _entries(work) - before


@pytest.mark.parametrize(
    "spec, said",
    [
        ("/bin/true", "printed nothing"),
        ("/bin/echo", "is not a python with torch"),
        ("./notver.sh", "printed 'hello world'"),
        ("2.1.0.dev20230230", "20230230 is not a date"),
        ("2.1.0.dev20231340", "20231340 is not a date"),
    ],
)
@pytest.mark.parametrize(
    "command", [["run", "--case", "append_last"], ["race", "--case", "append_last", "--case", "dynamic_slice"]]
)
def test_a_torch_that_is_no_torch_is_refused_in_one_line(work, command, spec, said):
    _refused(work, *command, "--torch", spec, "--db", "a.db", fragments=(said,))


def test_python_given_by_a_relative_path_is_run_from_there(work):
    _refused(
        work, "run", "--case", "append_last", "--python", "./notver.sh", "--db", "a.db", fragments=("hello world",)
    )


@pytest.mark.parametrize(
    "ends, said",
    [
        (["--from", "2.1.0.dev20231340", "--to", "2.1.0.dev20231345"], "'--from': '2.1.0.dev20231340'"),
        (["--from", "2.1.0.dev20230230", "--to", "2.1.0.dev20230301"], "'--from': '2.1.0.dev20230230'"),
        (["--from", "9999-12-30", "--to", "9999-12-31"], "no nightly of it exists yet"),
        (["--from", "2023-01-01", "--to", "2023-02-01", "--every", "99999999999999999999d"], "at most 36525 days"),
        (["--from", "2023-01-01", "--to", "2023-01-02", "--history", "text.txt"], "text.txt is not a diag database"),
        (["--from", "2023-01-01", "--to", "2023-01-02", "--db", "text.txt"], "text.txt is not a diag database"),
    ],
)
def test_backfill_refuses_impossible_days_and_files_of_the_wrong_kind(work, ends, said):
    _refused(work, "backfill", *ends, "--part", "--case all --backend eager", "--dry-run", fragments=(said,))


def test_backfill_does_not_ask_for_days_that_have_not_come(work, monkeypatch):
    """--to a year ahead: the windows end today, and the days after it are never looked up."""
    from diag import backfill

    asked: list[str] = []
    monkeypatch.setattr(backfill, "at_direct_url", lambda series, stamp, *rest: asked.append(stamp))
    done = diag_here(
        "backfill", "--from", "2.1.0.dev20261101", "--to", "2.1.0.dev20271231", "--part",
        "--case all --index-url http://127.0.0.1:9/", "--dry-run", "--json", cwd=work,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "is after today" in done.stderr and asked and max(asked) <= "20261231" and len(asked) <= 61


def test_bisect_refuses_an_impossible_dated_nightly(work):
    _refused(
        work, "bisect", "--good", "2.1.0.dev20230230", "--bad", "2.1.0.dev20230301", "--case", "append_last",
        "--db", "a.db", fragments=("20230230 is not a date",),
    )  # fmt: skip


@pytest.mark.parametrize(
    "command",
    [
        ["plan", "--shards", "2", "--part", "--case 'all"],
        ["backfill", "--from", "2023-01-01", "--to", "2023-01-02", "--part", "--case 'all"],
        ["plan", "--shards", "2", "--part", "--case all\\"],
    ],
)
def test_a_part_with_an_unbalanced_quote_is_refused(work, command):
    _refused(work, *command, fragments=("--part",))


def test_a_matrix_part_with_an_unbalanced_quote_is_refused(work):
    (work / "m.toml").write_text('[[part]]\nrun = "--case \'all"\n')
    _refused(work, "run", "--matrix", "m.toml", "--shard", "0/1", fragments=("part 0", "no closing quotation"))


@pytest.mark.parametrize("out", ["missing/plan.json", "/dev/full"])
def test_plan_into_a_place_it_cannot_write(work, out):
    _refused(work, "plan", "--shards", "2", "--part", "--case all --backend eager", "--out", out)


def test_plan_github_output_in_a_missing_folder(work, monkeypatch):
    monkeypatch.setenv("GITHUB_OUTPUT", str(work / "missing" / "out"))
    _refused(work, "plan", "--shards", "2", "--part", "--case all", "--github-output", "matrix", fragments=("missing",))


@pytest.mark.parametrize("shape", ["shares", "parts", "units"])
def test_a_plan_of_another_shape_is_refused(work, shape):
    done = diag_here("plan", "--shards", "2", "--part", "--case all --backend eager", "--out", "plan.json", cwd=work)
    assert done.returncode == 0, done.stderr
    plan = json.loads((work / "plan.json").read_text())
    if shape == "shares":
        plan["shares"] = [["x"], ["y"]]
    elif shape == "parts":
        plan["parts"] = "--case all"
    else:
        plan["shares"][0]["units"] = [1, 2]
    (work / "plan.json").write_text(json.dumps(plan))
    _refused(work, "run", "--plan", "plan.json", "--shard", "0/2", fragments=("not a plan diag wrote",))


@pytest.mark.parametrize("db", ["fifo", "loop1", "/dev/full"])
@pytest.mark.parametrize(
    "command",
    [
        ["run", "--case", "append_last", "--backend", "eager"],
        ["runs"],
        ["report", "--out", "site"],
        ["merge", "out.db"],
    ],
)
def test_a_db_that_is_no_file_is_refused_before_it_is_opened(work, command, db):
    """SQLite would block on a FIFO, write a device (and leave a -journal beside it), or fail on a loop."""
    args = [*command, db] if command[0] == "merge" else [*command, "--db", db]
    _refused(work, *args, fragments=(db, "not a regular file"))


def test_merge_of_a_shard_whose_runs_name_a_build_it_lacks(copied_db, work):
    conn = sqlite3.connect(copied_db)
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("DELETE FROM torch_builds WHERE id = (SELECT max(torch_build_id) FROM runs)")
    conn.commit()
    conn.close()
    done = diag_here("merge", str(work / "out.db"), str(copied_db), cwd=work)
    assert_one_line_error(done, "name a build it lacks", "nothing merged")
    assert diag_here("runs", "--db", str(work / "out.db"), "--json", cwd=work).stdout.strip() == "[]"


def test_non_utf8_bytes_in_an_argument(work, copied_db):
    bad = os.fsdecode(b"\xff\xfeappend")
    _refused(work, "runs", "--case", bad, "--db", str(copied_db), fragments=("not valid UTF-8",))


def test_a_malformed_torch_on_race_leaves_no_db(work):
    _refused(work, "race", "--case", "append_last", "--case", "dynamic_slice", "--torch", "2.x", "--db", "a.db")
