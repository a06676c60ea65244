"""Nightlies past the index, offline: a local index on 127.0.0.1 that lists only the newest nightlies.

The PyTorch nightly index cannot be reached from the test machines (that is what is mocked here,
and only that): tests/nightly_index.py serves a listing and wheel files at their direct URLs.
The fast tests use tiny stand-in wheels and never install them; the slow test installs real
torch wheels relabelled as dated nightlies, one of them broken like the 2023 nightlies.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import sys

import nightly_index
import pytest
from conftest import diag
from factories import small

from diag import bisect, envs
from diag.envs import wheels

CP = f"cp{sys.version_info[0]}{sys.version_info[1]}"


@pytest.fixture
def index(tmp_path, monkeypatch):
    """Stand-in nightlies 2.14.0.dev20260101..05 (no 20260102) as files; the listing names 04 and 05."""
    monkeypatch.setenv("DIAG_HOME", str(tmp_path / "home"))
    root = tmp_path / "www"
    made = nightly_index.stand_ins(root, (1, 3, 4, 5), listed=(4, 5))
    with nightly_index.Server(root) as server:
        yield server.url + "/nightly/cpu", made


def _request(spec, index_url, **kwargs):
    return envs.Request(envs.parse_spec(spec), index_url=index_url, **kwargs)


def test_a_dated_nightly_is_found_listed_then_at_its_direct_url_then_refused_in_one_line(index):
    url, made = index
    listed = envs.find_wheel(_request("2.14.0.dev20260105", url))
    assert (listed.origin, listed.base_version) == ("index", "2.14.0.dev20260105")
    unlisted = envs.find_wheel(_request("2.14.0.dev20260101", url))
    assert unlisted.origin == "direct URL"
    assert unlisted.location == f"{url}/torch-2.14.0.dev20260101%2Bcpu-{CP}-{CP}-linux_x86_64.whl"
    with pytest.raises(envs.EnvError) as missing:
        envs.find_wheel(_request("2.14.0.dev20260102", url))
    message = str(missing.value)
    assert "\n" not in message and "none at its direct URL" in message and "2.14.0.dev20260102" in message


def test_a_prefix_takes_the_newest_listed_and_one_with_none_listed_says_why(index, tmp_path):
    url, _ = index
    assert envs.find_wheel(_request("2.14.0.dev", url)).base_version == "2.14.0.dev20260105"
    assert envs.find_wheel(_request("nightly", url)).base_version == "2.14.0.dev20260105"
    done = diag("run", "--case", "append_last", "--torch", "2.12.0.dev", "--index-url", url, cwd=tmp_path, check=False)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert len(done.stderr.strip().splitlines()) == 1
    for needed in (
        "lists no 2.12.0 nightly",
        "about two months",
        "2.12.0.devYYYYMMDD",
        "wheel URL",
        "--find-links",
        "release 2.12.0",
    ):
        assert needed in last, last


def test_local_folders_and_the_cache_come_before_the_index(index, tmp_path):
    url, _ = index
    folder = tmp_path / "mine"
    folder.mkdir()
    mine = nightly_index.stand_in("2.14.0.dev20260105+cpu", folder)
    found = envs.find_wheel(_request("2.14.0.dev20260105", url, find_links=(str(folder),)))
    assert (found.origin, found.location) == ("find-links", str(mine))
    # a wheel for another Python, platform or variant is never chosen
    nightly_index.stand_in("2.14.0.dev20260106+cpu", folder, python_tag="cp27")
    nightly_index.stand_in("2.14.0.dev20260107+cu126", folder)
    newest = envs.find_wheel(_request("2.14.0.dev", url, find_links=(str(folder),)))
    assert newest.base_version == "2.14.0.dev20260105"


def test_a_fetched_wheel_is_cached_hashed_and_the_cache_stays_bounded(index, monkeypatch):
    url, made = index
    first = envs.find_wheel(_request("2.14.0.dev20260101", url))
    path, sha256 = wheels.fetch(first)
    assert path.parent == wheels.cache_dir() and sha256 == wheels.sha256_of(made[1])
    again = envs.find_wheel(_request("2.14.0.dev20260101", url))
    assert again.origin == "wheel cache"
    size_mb = path.stat().st_size / 2**20
    monkeypatch.setenv("DIAG_WHEEL_CACHE_MB", str(size_mb * 1.5))
    second, _ = wheels.fetch(envs.find_wheel(_request("2.14.0.dev20260103", url)))
    assert second.exists() and not path.exists()  # least recently used out, the new one kept


def test_a_wheel_url_or_file_is_a_spec(index, tmp_path):
    url, made = index
    assert envs.parse_spec(f"{url}/{made[3].name}").kind == "wheel"
    given = envs.find_wheel(envs.Request(envs.parse_spec(f"{url}/{made[3].name.replace('+', '%2B')}")))
    assert (given.origin, given.base_version) == ("given", "2.14.0.dev20260103")
    assert envs.find_wheel(envs.Request(envs.parse_spec(str(made[3])))).location == str(made[3])
    with pytest.raises(envs.EnvError, match="nothing is served"):
        envs.find_wheel(
            envs.Request(envs.parse_spec(f"{url}/torch-2.14.0.dev20260109%2Bcpu-{CP}-{CP}-linux_x86_64.whl"))
        )
    with pytest.raises(envs.EnvError, match="not a torch wheel"):
        envs.find_wheel(envs.Request(envs.parse_spec(str(tmp_path / "numpy-1.0-py3-none-any.whl"))))


def test_bisect_candidates_reach_past_the_listing_and_name_missing_dates(index):
    url, _ = index
    found = bisect.candidates(
        envs.parse_spec("2.14.0.dev20260101"),
        envs.parse_spec("2.14.0.dev20260105"),
        None,
        url,
        "cpu",
        stored=["2.14.0.dev20251230+cpu"],
        request=_request("2.14.0.dev20260101", url),
    )
    assert found.specs == [f"2.14.0.dev202601{d:02d}" for d in (1, 3, 4, 5)]
    assert found.missing_dates == ["20260102"]
    assert found.sources["2.14.0.dev20260103"] == ["direct URL"]
    assert found.sources["2.14.0.dev20260104"] == ["index"]


# ---------------------------------------------------------------------------------------------
# End to end with real torch: relabelled 2.13.0 CPU wheels 2.14.0.dev20260102..04, broken from 03 on; the
# listing names only 04, so bisect crosses its edge, and every build it provisions is used again after.


@pytest.fixture(scope="module")
def real_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("nightlies")
    files = root / "nightly" / "cpu"
    files.mkdir(parents=True)
    source = nightly_index.release_wheel(tmp_path_factory.mktemp("release"))
    # 02 a good build; 03 and 04 with the guards TypeError; 06 breaking the graph at attention, 05 before
    # it a wheel that cannot be installed (cut short)
    made = {
        day: nightly_index.relabel(
            source, f"2.14.0.dev202601{day:02d}+cpu", files, patch_guards=day in (3, 4), patch_attention=day >= 6
        )
        for day in (2, 3, 4, 6)
    }
    made[5] = files / made[2].name.replace("dev20260102", "dev20260105")
    made[5].write_bytes(made[2].read_bytes()[: 1 << 20])
    source.unlink()
    nightly_index.write_listing(root, "cpu", [made[4]])
    with nightly_index.Server(root) as server:
        yield server.url + "/nightly/cpu", made


@pytest.mark.slow
def test_the_nightly_path_end_to_end(real_index, tmp_path, monkeypatch):
    url, made = real_index
    home = tmp_path / "home"
    extra = {"DIAG_HOME": str(home)}
    db = tmp_path / "n.db"
    common = [*small(timing=True, prompt_length=8), "--db", str(db)]
    # bisect across the listing's edge: 02 and 03 are served only at their direct URLs
    bisecting = [
        "bisect",
        "--case",
        "append_last",
        "--good",
        "2.14.0.dev20260102",
        "--bad",
        "2.14.0.dev20260104",
        "--index-url",
        url,
        "--index",
        url,
        *common,
        "--json",
    ]
    done = diag(*bisecting, cwd=tmp_path, env_extra=extra, timeout=3000)
    result = json.loads(done.stdout)
    assert result["first_bad"]["version"] == "2.14.0.dev20260103+cpu"
    assert result["last_good"]["version"] == "2.14.0.dev20260102+cpu"
    assert (result["good_status"], result["bad_status"]) == ("pass", "compile_error")
    assert result["sources"]["2.14.0.dev20260103"] == ["direct URL"] and result["missing_dates"] == []
    assert result["commit_range"] == f"{result['last_good']['git_version']}..{result['first_bad']['git_version']}"
    # the ends 4 runs each (steady: the bad end failed in all 4), the build between one
    assert result["runs"] == {"2.14.0.dev20260102": 4, "2.14.0.dev20260104": 4, "2.14.0.dev20260103": 1}
    assert result["runs_to_judge"] == 1 and result["reproduce"].startswith("diag run --torch 2.14.0.dev20260103 ")
    # asked again, it reuses every stored run and says so
    again = diag(*bisecting, cwd=tmp_path, env_extra=extra, timeout=600)
    assert again.stderr.count("reusing ") == 3 and "running" not in again.stderr
    assert json.loads(again.stdout)["first_bad"] == result["first_bad"]
    # on another signal, the graphs torch compiled (1, then 0 where the compile fails), from the same runs
    on_graphs = [*bisecting[:-1], "--on", "count:graphs", "--json"]
    counted = json.loads(diag(*on_graphs, cwd=tmp_path, env_extra=extra, timeout=600).stdout)
    assert counted["signal"] == "count:graphs" and counted["good_value"].startswith("graphs = ")
    assert counted["good_value"] not in counted["bad_values"]
    assert counted["first_bad"]["version"] == "2.14.0.dev20260103+cpu" and counted["runs"] == result["runs"]
    # and on the code it compiled: the good end's 4 runs one digest, the broken build's none, and why
    on_code = [*bisecting[:-1], "--on", "code", "--json"]
    coded = json.loads(diag(*on_code, cwd=tmp_path, env_extra=extra, timeout=600).stdout)
    assert re.fullmatch(r"code [0-9a-f]{16}", coded["good_value"]), coded["good_value"]
    assert coded["bad_values"] == ["code not known: the trace holds no compiled graph's code"] * 4, coded
    assert coded["first_bad"]["version"] == "2.14.0.dev20260103+cpu" and coded["runs"] == result["runs"]
    builds = {
        row[0]: row[1:]
        for row in sqlite3.connect(db).execute(
            "SELECT version, wheel_url, wheel_origin, wheel_sha256 FROM torch_builds"
        )
    }
    first_bad = builds["2.14.0.dev20260103+cpu"]
    assert first_bad[1] == "direct URL" and first_bad[0].endswith(made[3].name.replace("+", "%2B"))
    assert first_bad[2] == wheels.sha256_of(made[3])
    # the gate fails on the first bad build against the last good one, and says so in JUnit
    junit = tmp_path / "junit.xml"
    done = diag(
        "check", "--db", str(db), "--baseline", "2.14.0.dev20260102", "--junit", str(junit), cwd=tmp_path, check=False
    )
    stored = sqlite3.connect(db).execute(
        "SELECT r.id, b.version, r.status, r.python, r.transformers_version, r.backend, r.fullgraph, r.model"
        " FROM runs r JOIN torch_builds b ON b.id = r.torch_build_id ORDER BY r.id"
    )
    said = f"{done.stdout}{done.stderr}\nstored runs: {stored.fetchall()}"
    assert done.returncode == 1 and "status pass -> compile_error" in done.stdout, said
    assert 'failures="1"' in junit.read_text()
    # the report's front page shows the transition, its error and its commit range
    diag("report", "--db", str(db), "--out", str(tmp_path / "site"), cwd=tmp_path)
    index = (tmp_path / "site" / "index.html").read_text()
    transitions = index[index.index("<h2>Newest transitions</h2>") :]
    assert "2.14.0.dev20260103+cpu" in transitions and "unexpected keyword argument" in transitions
    assert "pytorch/pytorch/compare/" in transitions
    # the newest of a series, and the error the broken nightlies raise, named
    done = diag(
        "run",
        "--case",
        "append_last",
        "--torch",
        "2.14.0.dev",
        "--index-url",
        url,
        *common,
        "--json",
        cwd=tmp_path,
        env_extra=extra,
        timeout=1200,
    )
    run = json.loads(done.stdout)[0]
    assert run["build_version"] == "2.14.0.dev20260104+cpu" and run["status"] == "compile_error"
    assert "unexpected keyword argument 'guards'" in run["error_message"]
    shown = diag("show", str(run["id"]), "--db", str(db), cwd=tmp_path).stdout
    assert "build_wheel_url: " in shown and "build_wheel_sha256: " in shown
    # a backfill of every other day, 02 and 04 (02 found at its direct URL), sharded in two: the
    # shards run one build each, in the environments bisect provisioned
    backfill = ["backfill", "--from", "2.14.0.dev20260102", "--to", "2.14.0.dev20260104"]
    part = (
        f"--case append_last --backend eager --fullgraph --new-tokens 3 --prompt-length 8 --no-timing --index-url {url}"
    )
    backfilled = []
    for k in range(2):
        shard_db = str(tmp_path / f"backfill-{k}.db")
        done = diag(
            *backfill,
            "--every",
            "2d",
            "--part",
            part,
            "--shard",
            f"{k}/2",
            "--db",
            shard_db,
            "--json",
            cwd=tmp_path,
            env_extra=extra,
            timeout=1200,
        )
        assert len(json.loads(done.stdout)) == 1 and "2 builds to run" in done.stderr
        backfilled += json.loads(done.stdout)
    assert sorted(r["build_version"] for r in backfilled) == ["2.14.0.dev20260102+cpu", "2.14.0.dev20260104+cpu"]
    assert {r["status"] for r in backfilled} == {"pass", "compile_error"}
    # the history has every day of the range already: nothing is left to run
    done = diag(*backfill, "--part", part, "--history", str(db), "--dry-run", "--json", cwd=tmp_path, env_extra=extra)
    assert json.loads(done.stdout)["builds"] == [] and len(json.loads(done.stdout)["skipped"]) == 3
    # a date with no nightly is refused, not answered with some other build
    done = diag("env", "add", "2.14.0.dev20251231", "--index-url", url, cwd=tmp_path, env_extra=extra, check=False)
    assert done.returncode == 1 and "none at its direct URL" in done.stderr
    # a stored build installs again from its recorded wheel, checked by sha256
    (home / "wheels" / made[3].name).unlink()
    done = diag(
        "env",
        "add",
        "--like",
        "2.14.0.dev20260103",
        "--db",
        str(db),
        "--json",
        cwd=tmp_path,
        env_extra=extra,
        timeout=1200,
    )
    assert json.loads(done.stdout)["torch_version"] == "2.14.0.dev20260103+cpu"
    reinstalled = [
        env for env in home.joinpath("envs").iterdir() if env.name.startswith("torch-torch-2.14.0.dev20260103")
    ]
    assert len(reinstalled) == 1  # an environment of its own: the wheel, its Python and transformers
    shutil.rmtree(reinstalled[0])
    (home / "wheels" / made[3].name).unlink()
    good = made[2].read_bytes()
    made[3].write_bytes(good)  # the URL now serves another build's bytes
    done = diag(
        "env",
        "add",
        "--like",
        "2.14.0.dev20260103",
        "--db",
        str(db),
        cwd=tmp_path,
        env_extra=extra,
        check=False,
        timeout=1200,
    )
    assert done.returncode == 1 and "sha256" in done.stderr and "not the build that was run" in done.stderr
    # last: a graph break a later nightly adds (GB4636, at attention, in 06), 05 between failing to
    # install: bisected on the GB id appearing, then on the code the runs compiled, 05 skipped and
    # named both times, and the boundary still found
    listed = tmp_path / "candidates.txt"
    listed.write_text("".join(f"2.14.0.dev202601{day:02d}\n" for day in (2, 5, 6)))
    no_fullgraph = [*small(timing=True, fullgraph=False, prompt_length=8), "--db", str(db), "--confirm", "0"]
    on_break = [*bisecting[:6], "2.14.0.dev20260106", "--candidates", str(listed), "--index-url", url, *no_fullgraph]
    broke = json.loads(
        diag(*on_break, "--on", "key:GB4636", "--json", cwd=tmp_path, env_extra=extra, timeout=1800).stdout
    )
    assert (broke["last_good"]["version"], broke["first_bad"]["version"]) == (
        "2.14.0.dev20260102+cpu",
        "2.14.0.dev20260106+cpu",
    ), broke
    assert list(broke["skipped"]) == ["2.14.0.dev20260105"] and broke["skipped"]["2.14.0.dev20260105"], broke
    assert (broke["good_value"], broke["bad_values"]) == ("GB4636 absent", ["GB4636 present"])
    recoded = diag(*on_break, "--on", "code", "--json", cwd=tmp_path, env_extra=extra, timeout=600)
    again = json.loads(recoded.stdout)
    assert again["first_bad"] == broke["first_bad"] and list(again["skipped"]) == ["2.14.0.dev20260105"]
    assert again["good_value"] != again["bad_values"][0] and "running" not in recoded.stderr


def test_nightly_is_keyed_on_the_newest_build_so_a_kept_env_is_never_yesterdays(index, monkeypatch, tmp_path):
    url, made = index
    provisioned = []
    monkeypatch.setattr(
        envs, "provision", lambda request, log, wheel=None, label=None: provisioned.append((request, wheel, label))
    )
    envs.resolve(envs.parse_spec("nightly"), envs.Options(index_url=url))
    nightly_index.stand_in("2.14.0.dev20260106+cpu", made[1].parent)
    nightly_index.write_listing(made[1].parents[2], "cpu", [made[5], made[1].parent / made[5].name.replace("05", "06")])
    envs.resolve(envs.parse_spec("nightly"), envs.Options(index_url=url))
    (first, _, label), (second, wheel, _) = provisioned
    assert (first.spec.text, second.spec.text, label) == ("2.14.0.dev20260105", "2.14.0.dev20260106", "nightly")
    assert envs.env_key(first) != envs.env_key(second) and wheel.origin == "index"


class _SignIn(nightly_index.QuietHandler):
    """A server that answers every wheel address with a 200 and an HTML sign-in page, and counts GETs."""

    gets = 0

    def do_GET(self):  # the stdlib's name
        if not self.path.endswith(".whl"):
            return super().do_GET()
        type(self).gets += 1
        page = b"<!DOCTYPE html><html><body>Sign in</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)


def test_a_page_served_as_a_wheel_is_never_kept_and_a_later_run_asks_again(tmp_path, monkeypatch):
    """A wheel URL that answers with a sign-in page: one line naming what was served, nothing in the
    cache, and the next fetch downloads again (before: the 53-byte page was kept as the wheel and
    reused by every later run). A page an older diag kept in the cache is removed when the cache is read."""
    monkeypatch.setenv("DIAG_HOME", str(tmp_path / "home"))
    wheels.cache_dir().mkdir(parents=True)
    name = "torch-2.14.0.dev20260101%2Bcpu-cp311-cp311-linux_x86_64.whl"
    with nightly_index.Server(tmp_path, _SignIn) as server:
        wheel = wheels.Wheel(name.replace("%2B", "+"), f"{server.url}/{name}", "given")
        for attempt in (1, 2):
            with pytest.raises(wheels.WheelError, match="did not serve a wheel: 48 bytes that are no zip") as caught:
                wheels.fetch(wheel)
            assert "\n" not in str(caught.value) and _SignIn.gets == attempt
            assert list(wheels.cache_dir().iterdir()) == []
    kept = wheels.cache_dir() / name.replace("%2B", "+")
    kept.write_bytes(b"<!DOCTYPE html><html><body>Sign in</body></html>")
    assert wheels.cached_wheels() == [] and not kept.exists()


def test_a_wheel_whose_sha256_is_not_the_indexs_is_refused(index, tmp_path):
    url, made = index
    listed = wheels.Wheel(made[1].name, f"{url}/{made[1].name}", "index", "0" * 64)
    with pytest.raises(wheels.WheelError, match="the index gave 0000"):
        wheels.fetch(listed)
    assert list(wheels.cache_dir().iterdir()) == []
    right = wheels.Wheel(made[1].name, f"{url}/{made[1].name}", "index", wheels.sha256_of(made[1]))
    assert wheels.fetch(right)[1] == wheels.sha256_of(made[1])


def _damage_a_member(path) -> None:
    """One byte of the METADATA member's data changed: the archive still opens, the member's CRC fails."""
    data = bytearray(path.read_bytes())
    at = data.index(b"Name: torch")
    data[at] ^= 0x20
    path.write_bytes(bytes(data))


def test_a_cached_wheel_damaged_since_it_was_fetched_is_fetched_again(index):
    """A dated nightly past the listing (a direct URL: no sha256 from the index): the cache keeps the
    sha256 it had when fetched whole, so a member damaged later is found and the wheel fetched again,
    never handed to pip (whose error was a bare 'ERROR: Exception:')."""
    url, made = index
    path, digest = wheels.fetch(envs.find_wheel(_request("2.14.0.dev20260101", url)))
    _damage_a_member(path)
    again = envs.find_wheel(_request("2.14.0.dev20260101", url))
    assert again.origin == "direct URL" and not path.exists()
    refetched, digest_again = wheels.fetch(again)
    assert digest_again == digest == wheels.sha256_of(refetched)
    assert envs.find_wheel(_request("2.14.0.dev20260101", url)).origin == "wheel cache"


def test_a_wheel_an_older_diag_cached_has_its_members_checked_once(index):
    url, made = index
    wheels.cache_dir().mkdir(parents=True)
    kept = wheels.cache_dir() / made[1].name
    shutil.copy(made[1], kept)
    _damage_a_member(kept)
    found = envs.find_wheel(_request("2.14.0.dev20260101", url))
    assert found.origin == "direct URL" and not kept.exists()
    path, digest = wheels.fetch(found)
    assert path == kept and digest == wheels.sha256_of(made[1])


def test_a_fifo_in_the_wheel_cache_or_a_find_links_folder_is_passed_over(index, tmp_path):
    """A FIFO named like the wheel (left by a tool, or made on purpose): never opened, which would
    block; the wheel is found at the index and fetched over it."""
    import os

    url, made = index
    wheels.cache_dir().mkdir(parents=True)
    os.mkfifo(wheels.cache_dir() / made[1].name)
    folder = tmp_path / "mine"
    folder.mkdir()
    os.mkfifo(folder / made[3].name)
    found = envs.find_wheel(_request("2.14.0.dev20260101", url, find_links=(str(folder),)))
    assert found.origin == "direct URL"
    path, digest = wheels.fetch(found)
    assert path.is_file() and digest == wheels.sha256_of(made[1])
    assert envs.find_wheel(_request("2.14.0.dev20260103", url, find_links=(str(folder),))).origin == "direct URL"
