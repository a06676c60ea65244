"""diag backfill: the nightlies of a date range, one a window, from every place a build can be
found, skipping the history's. A local stand-in of the nightly index on 127.0.0.1 (the real one
cannot be reached from the test machine); runs on real relabelled builds are in test_nightly_path.py."""

from __future__ import annotations

import json

import nightly_index
import pytest
from conftest import diag_here

from diag import backfill


@pytest.fixture
def sources(tmp_path, monkeypatch):
    """2.14.0.dev202601xx stand-ins: 01 and 03 at their direct URLs only, 04 and 05 listed, 08 in a
    wheel folder, 10 and 11 in the history; none for 02, 06, 07, 09, 12."""
    monkeypatch.setenv("DIAG_HOME", str(tmp_path / "home"))
    root = tmp_path / "www"
    nightly_index.stand_ins(root, (1, 3, 4, 5), listed=(4, 5))
    folder = tmp_path / "folder"
    folder.mkdir()
    nightly_index.stand_in("2.14.0.dev20260108+cpu", folder)
    history = tmp_path / "history.db"
    from diag import store

    db = store.open_db(history)
    for day in (10, 11):
        db["torch_builds"].insert({"version": f"2.14.0.dev202601{day}+cpu", "git_version": "a" * 40})
    with nightly_index.Server(root) as server:
        yield server.url + "/nightly/cpu", folder, history


def _dry_run(tmp_path, url, folder, history, *extra: str) -> dict:
    part = f"--case append_last --backend eager --index-url {url} --find-links {folder}"
    done = diag_here("backfill", *extra, "--part", part, "--history", str(history), "--dry-run", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_one_build_a_window_from_the_index_direct_urls_folders_and_the_history(sources, tmp_path):
    url, folder, history = sources
    ends = ["--from", "2.14.0.dev20260101", "--to", "2.14.0.dev20260112"]
    found = _dry_run(tmp_path, url, folder, history, *ends, "--every", "3d")
    # windows 01-03, 04-06, 07-09, 10-12: the earliest build of each
    assert found["builds"] == ["2.14.0.dev20260101", "2.14.0.dev20260104", "2.14.0.dev20260108"]
    assert found["skipped"] == ["2.14.0.dev20260110"] and found["empty_windows"] == []
    assert found["sources"]["2.14.0.dev20260101"] == ["direct URL"]
    assert found["sources"]["2.14.0.dev20260104"] == ["index"]
    assert found["sources"]["2.14.0.dev20260108"] == ["folder"]
    daily = _dry_run(tmp_path, url, folder, history, *ends)
    assert daily["builds"] == [f"2.14.0.dev202601{d:02d}" for d in (1, 3, 4, 5, 8)]
    assert daily["empty_windows"] == [f"2026-01-{d:02d}" for d in (2, 6, 7, 9, 12)]


def test_dates_without_a_series_use_what_is_listed_and_known(sources, tmp_path):
    url, folder, history = sources
    found = _dry_run(tmp_path, url, folder, history, "--from", "2026-01-01", "--to", "20260109", "--every", "1w")
    # no series at either end: no direct URLs; 01 and 03 are not found, 04 and 08 are
    assert found["builds"] == ["2.14.0.dev20260104", "2.14.0.dev20260108"]


@pytest.mark.parametrize(
    "args, said",
    [
        (["--from", "2026-13-01", "--to", "2026-01-02"], "'--from': '2026-13-01': expected a date"),
        (["--from", "2.14.0", "--to", "2026-01-02"], "'--from': '2.14.0': expected a date"),
        (["--from", "2026-01-05", "--to", "2026-01-02"], "--from 2026-01-05 comes after --to 2026-01-02"),
        (["--from", "2026-01-01", "--to", "2026-01-02", "--every", "0d"], "'--every': '0d': expected days or weeks"),
        (["--from", "2026-01-01", "--to", "2026-01-02", "--every", "week"], "expected days or weeks"),
    ],
)
def test_bad_backfill_input_is_one_line(tmp_path, args, said):
    done = diag_here("backfill", *args, "--part", "--case append_last", "--dry-run", cwd=tmp_path)
    # a value refused where it enters is a usage error (2); one refused by what it means together with
    # the others (--from after --to), an error of the command (1)
    assert done.returncode in (1, 2) and said in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.returncode == (1 if "comes after" in said else 2)
    done = diag_here(
        "backfill", "--from", "2026-01-01", "--to", "2026-01-02", "--part", "--case all --torch 2.13.0", cwd=tmp_path
    )
    assert "backfill chooses the builds" in done.stderr


def test_a_history_that_is_not_there_is_one_line_not_an_empty_history(tmp_path):
    args = ["--from", "2026-01-01", "--to", "2026-01-02", "--part", "--case append_last", "--dry-run"]
    done = diag_here("backfill", *args, "--history", "typo.db", cwd=tmp_path)
    assert done.returncode == 1 and "--history typo.db: no such file" in done.stderr
    assert done.stderr.count("\n") == 1 and not (tmp_path / "typo.db").exists()


def test_an_end_is_a_date_or_a_dated_nightly():
    assert backfill.parse_end("2.1.0.dev20230601").series == "2.1.0"
    assert str(backfill.parse_end("20230601").day) == "2023-06-01"
    assert backfill.parse_every("2w") == 14
