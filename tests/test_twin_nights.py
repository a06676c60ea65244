"""Twin nights: a pinned stable release timed on the same runner each night tells the host's change
from torch's (diag check --stable). Recorded run directories with rewritten timing samples, stored
through the real path (assemble, save) into a real SQLite file, judged by the real command."""

from __future__ import annotations

import json

import pytest
from conftest import NIGHTLY, diag_here, recorded_timed, replay

STABLE = {"torch_version": "2.12.0+cpu", "git_version": "c" * 40}
NEXT_NIGHTLY = {"torch_version": "2.14.0.dev20260102+cpu", "git_version": "d" * 40}
RUNS = 4  # a side: the least the rank test can use at alpha 0.02
STEP_S = 1e-3


def _night(into, tag: str, build: dict, invocation: str, factor: float, seed: int):
    """RUNS append_last runs on ``build``, one invocation, decode steps ``factor`` x STEP_S; the
    pure-Python host reference stays as it was (what it cannot see is the point)."""
    return [
        recorded_timed(
            into,
            f"{tag}{index}",
            build,
            STEP_S * factor,
            seed * 100 + index,
            run={"invocation": invocation, "started_at": f"2026-12-0{1 + seed % 9}T0{index}:00:00+00:00"},
        )
        for index in range(RUNS)
    ]


def _history(tmp_path, stable_factor: float, nightly_factor: float):
    """Night 1: the stable build and the nightly, both at STEP_S. Night 2: the stable build again and
    the next nightly, each slower by its factor (the same runner, the same night)."""
    into = tmp_path / "runs"
    dirs = _night(into, "s1-", STABLE, "night-1-stable", 1.0, 1)
    dirs += _night(into, "n1-", NIGHTLY, "night-1-nightly", 1.0, 2)
    dirs += _night(into, "s2-", STABLE, "night-2-stable", stable_factor, 3)
    dirs += _night(into, "n2-", NEXT_NIGHTLY, "night-2-nightly", nightly_factor, 4)
    db = tmp_path / "nights.db"
    replay(dirs, db)
    return db


def _check(db, tmp_path, *extra):
    done = diag_here("check", "--db", str(db), "--json", *extra, cwd=tmp_path)
    return done.returncode, json.loads(done.stdout)


@pytest.mark.parametrize("stable_factor, nightly_factor", [(1.15, 1.15), (1.0, 1.10)], ids=["host-15", "nightly-10"])
def test_the_stable_leg_tells_the_host_from_torch(tmp_path, stable_factor, nightly_factor):
    db = _history(tmp_path, stable_factor, nightly_factor)
    code, plain = _check(db, tmp_path)
    assert code == 1 and any("compiled_s_per_token" in r["message"] for r in plain["regressions"]), plain
    code, twin = _check(db, tmp_path, "--stable", "2.12.0")
    claimed = [r for r in twin["regressions"] if r["kind"] == "slowdown"]
    if stable_factor > 1:  # the host slowed both legs: no claim against torch, and it says why
        assert code == 0 and claimed == [], twin
        said = [h["message"] for h in twin["host_changed"]]
        assert said and all("host changed" in m and "stable 2.12.0+cpu moved x1.1" in m for m in said), said
    else:  # the nightly alone: claimed, beside the stable leg that held
        assert code == 1 and claimed and twin["host_changed"] == [], twin


def test_a_slowdown_beyond_the_hosts_own_is_still_torchs(tmp_path):
    db = _history(tmp_path, 1.15, 1.15 * 1.10)
    code, twin = _check(db, tmp_path, "--stable", "2.12.0")
    assert code == 1, twin
    (latency,) = [r for r in twin["regressions"] if "compiled_s_per_token" in r["message"]]
    assert "beyond it" in latency["message"] and "x1.1" in latency["message"]
