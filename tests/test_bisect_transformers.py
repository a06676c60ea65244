"""``diag bisect --transformers``: torch fixed, transformers releases searched; and ``check`` naming the
two bisects when torch and transformers moved together."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
from conftest import REPO, diag

from diag import bisect, store
from diag import row as rows
from diag.verdicts import gate

sys.path.insert(0, str(REPO / "bench"))
import synthetic  # after sys.path names bench/
from factories import package_bisect


def test_the_releases_between_two_leave_out_pre_releases_and_keep_both_ends():
    listed = ["5.0.0", "4.57.1", "4.57.0", "4.57.0rc1", "4.56.2", "4.56.0.dev0", "4.55.0", "4.50.0+local"]
    assert bisect.release_versions(listed, "4.56.2", "4.57.1") == ["4.56.2", "4.57.0", "4.57.1"]
    assert bisect.release_versions(["4.57.1"], "4.55.0", "4.57.1") == ["4.55.0", "4.57.1"]  # an end not listed
    for good, bad in (("4.57.1", "4.56.2"), ("4.57.0rc1", "4.57.1"), ("4.56.2", "x")):
        with pytest.raises(bisect.BisectError):
            bisect.release_versions(listed, good, bad)


def test_a_transformers_range_links_the_release_tags():
    axis = bisect.Axis("transformers", "2.13.0")
    good, bad = axis.summary(None, "4.52.4"), axis.summary(None, "4.53.0")
    assert axis.compare(good, bad) == (
        "v4.52.4..v4.53.0",
        "https://github.com/huggingface/transformers/compare/v4.52.4...v4.53.0",
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--transformers", "4.45.2"], "give two releases as GOOD..BAD"),
        (["--transformers", "4.45.2..4.57.1", "--good", "2.1.0"], "takes the place of --good/--bad"),
        (["--transformers", "4.45.2..4.57.1", "--with", "transformers==4.50.0"], "leave it out of --with"),
        (["--transformers", "4.45.2..4.57.1", "--torch", "nightly"], "needs a torch release or dated nightly"),
        (["--transformers", "4.57.1..4.45.2", "--torch", "2.13.0"], "must come before"),
        ([], "needs --good and --bad"),
        (["--good", "2.1.0", "--bad", "2.2.0", "--torch", "2.13.0"], "--torch fixes torch for --package"),
        (["--package", "depyf"], "give two releases as NAME=GOOD..BAD"),
        (["--package", "depyf=0.18.0..0.19.0", "--transformers", "4.45.2..4.57.1"], "give one of them"),
        (["--package", "depyf=0.18.0..0.19.0", "--with", "depyf==0.18.0"], "moves depyf itself"),
        (["--good", "2.1.0", "--bad", "2.2.0", "--on", "ratio:latency>=1.1", "--confirm", "0"], "--confirm 1 or more"),
        (["--good", "2.1.0", "--bad", "2.2.0", "--on", "ratio:speed>=1.1"], "names no signal"),
    ],
)
def test_bad_bisect_arguments_are_one_line_errors(args, message, tmp_path):
    done = diag("bisect", "--case", "append_last", *args, "--db", str(tmp_path / "x.db"), cwd=tmp_path, check=False)
    assert done.returncode != 0 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "x.db").exists()


def _night(day: int, version: str, transformers: str, status: str):
    build = synthetic.nightly(day, random.Random(day))
    build = {**build, "version": version, "nightly_date": None, "git_version": f"{day:040x}"}
    row = {"case": "hf_static_cache", "backend": "eager", "fullgraph": 1, "dtype": "float32"}
    error = synthetic.SLICE_ERROR if status != "pass" else None
    return synthetic.record(build, f"{version}-{transformers}", row, status, random.Random(day), error, transformers)


def test_check_names_both_bisects_when_torch_and_transformers_moved_together(tmp_path):
    db_path = tmp_path / "h.db"
    db = store.open_db(db_path)
    store.save_runs(db, [_night(1, "2.12.0", "4.56.2", "pass"), _night(2, "2.13.0", "4.57.0", "fullgraph_error")])
    db.conn.close()
    done = diag("check", "--db", str(db_path), cwd=tmp_path)
    out = done.stdout
    assert "both torch (2.12.0 -> 2.13.0) and transformers (4.56.2 -> 4.57.0) moved" in out, out
    flags = "--case hf_static_cache --backend eager --fullgraph --batch-size 1 --prompt-length 16 --new-tokens 16"
    assert f"diag bisect {flags} --good 2.12.0 --bad 2.13.0 --with transformers==4.56.2" in out
    assert f"diag bisect {flags} --transformers 4.56.2..4.57.0 --torch 2.12.0" in out
    # one side only moved: the row is compared as before, and no bisect pair is offered
    run = {"status": "pass", "build_version": "2.12.0", "transformers_version": "4.56.2"}
    fields = {"case_source": "builtin", "dynamic": "auto", "device": "cpu", "model": "tiny-random", "mode": "default"}
    row = rows.of({**synthetic.configs()[0], **fields, "batch_size": 1, "prompt_length": 16, "new_tokens": 16})
    assert gate.both_moved(row, run, {**run, "status": "crash", "build_version": "2.13.0"}) == ""
    assert gate.both_moved(row, run, {**run, "transformers_version": "4.57.0"}) == ""


def test_check_fails_a_night_on_which_the_case_notes_a_fallback_it_did_not_take_before(tmp_path):
    """A build on which transformers' static cache fails eagerly (a torch change it relies on) leaves an
    hf case passing on generate's own cache, with a note: the nightly gate names the note, as the
    status alone would say nothing."""
    db_path = tmp_path / "h.db"
    db = store.open_db(db_path)
    fell_back = _night(2, "2.13.0", "4.54.0", "pass")
    note = "this transformers' generate fails on ctrl with a static cache, eagerly (ValueError: no static)"
    fell_back.run["case_note"] = note
    store.save_runs(db, [_night(1, "2.12.0", "4.54.0", "pass"), fell_back])
    db.conn.close()
    done = diag("check", "--db", str(db_path), "--json", cwd=tmp_path, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    (found,) = json.loads(done.stdout)["regressions"]
    assert found["kind"] == "fallback" and note in found["message"], found
    compared = diag("compare", "2.12.0", "2.13.0", "--db", str(db_path), cwd=tmp_path).stdout
    assert f"the case says: - -> {note}" in compared, compared
    # the note on both sides is no news
    again = _night(3, "2.14.0", "4.54.0", "pass")
    again.run["case_note"] = note
    db = store.open_db(db_path)
    store.save_runs(db, [again])
    db.conn.close()
    assert diag("check", "--db", str(db_path), cwd=tmp_path, check=False).returncode == 0


def test_bisect_over_three_real_transformers_releases(tmp_path, torch_envs_home):
    """torch 2.13.0 fixed; hf:ctrl's generate takes a static cache on transformers 4.53.3 and refuses it
    on 4.54.0 (ValueError: "This model does not support `cache_implementation='static'`"; by 4.57.1 the
    failure is a RuntimeError on the attention mask's shape), as a bisect over 4.45.2..4.57.1 found.
    The case then decodes with generate's own cache and passes, and says so: the bisect finds the
    release where that began. Three real releases from the package index, each an overlay of one
    base of torch 2.13.0 without transformers, one run each (--confirm 0): the confirmed ends over
    real builds are test_nightly_path's, and over seeded flaky ones test_bisect's."""
    db = tmp_path / "tf.db"
    bisecting = package_bisect("hf:ctrl", ["--transformers", "4.53.2..4.54.0"], db, new_tokens=4)
    done = diag(*bisecting, "--json", cwd=tmp_path, timeout=1800, env_extra={"DIAG_HOME": str(torch_envs_home)})
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["moved"] == "transformers" and summary["torch"] == "2.13.0"
    assert (summary["good_status"], summary["bad_status"]) == ("pass", "pass")
    assert summary["good_note"] is None
    assert "static cache" in summary["bad_note"] and "ValueError" in summary["bad_note"], summary["bad_note"]
    assert summary["first_bad"]["case_note"] == summary["bad_note"]
    assert summary["candidates"] == 3 and list(summary["tested"]) == ["4.53.3"]
    assert summary["last_good"]["transformers"] == "4.53.3"
    assert summary["first_bad"]["transformers"] == "4.54.0"
    assert summary["compare_url"].endswith("/compare/v4.53.3...v4.54.0")
    stored = store.open_db(Path(db))
    versions = {r["transformers_version"] for r in stored.query("SELECT transformers_version FROM runs")}
    assert versions == {"4.53.2", "4.53.3", "4.54.0"}
    assert {r["version"].split("+")[0] for r in stored.query("SELECT version FROM torch_builds")} == {"2.13.0"}
