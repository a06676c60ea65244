"""Every figure says how far to trust it, on every surface: the same stored runs, one noisy in its
latency and one whose compile waited for a CPU, read through the run line, show, runs, compare,
check (text, --json, JUnit), the run and case pages and --json; each caveat is found on each.
Real SQLite files, the real command line and renderer."""

from __future__ import annotations

import json

from conftest import cli
from factories import run_record, stored

from diag.build import identity

OLD, NEW = identity("2.12.0+cpu", "a" * 40, None), identity("2.13.0+cpu", "b" * 40, None)
NOISY = "timing noisy (compiled steps spread 8.2x p90/p10), load 4.7 on 2 cores"
WAITED = "compile waited: 58.2 s wall for 26.5 s CPU; load 5.8 on 2 cores"
TIMED = {"compile_s": 20.0, "eager_ms_per_token": 1.5, "compiled_ms_per_token": 0.7, "timing_noisy": 0}


def _samples(index: int) -> list[dict]:
    """A timed run's decode steps, as the timing pass stores them."""
    steps = {
        mode: [ms / 1e3 * (1 + 0.01 * ((index + i) % 5)) for i in range(20)]
        for mode, ms in (("eager", 1.5), ("compiled", 0.7))
    }
    return [{"mode": m, "metric": "decode_step", "unit": "s", "samples": json.dumps(v)} for m, v in steps.items()]


def _history(db) -> None:
    for index in range(4):
        stored(db, run_record(build=OLD, uid=f"o{index}", new_tokens=6, timings=_samples(index), **TIMED))
    noisy = {**TIMED, "timing_noisy": 1, "timing_note": NOISY}
    stored(db, run_record(build=NEW, uid="n0", new_tokens=6, timings=_samples(5), **noisy))
    waited = {**TIMED, "compile_s": 58.2, "compile_cpu_s": 26.5, "compile_stall_s": 10.0}
    waited |= {"compile_noisy": 1, "compile_note": WAITED}
    stored(db, run_record(build=NEW, uid="n1", new_tokens=6, timings=_samples(6), **waited))


def _out(*args: str) -> str:
    done = cli(*args)
    assert done.exit_code in (0, 1, 3), done.output
    return done.output


def test_each_caveat_is_on_each_surface(tmp_path):
    db = str(tmp_path / "h.db")
    _history(db)
    runs = _out("runs", "--db", db)
    assert "noisy" in runs and "compile waited" in runs and "steady" in runs
    for run_id, caveat in ((5, "timing noisy"), (6, "compile waited")):
        assert caveat in _out("show", str(run_id), "--db", db)
        shown = json.loads(_out("show", str(run_id), "--db", db, "--json"))
        assert shown["timing_noisy"] == (run_id == 5) and shown["compile_noisy"] == (1 if run_id == 6 else None)
    # CPU and waiting add up to more than the wall time: the waiting is every task's, and show says so
    waited = _out("show", "6", "--db", db)
    assert "compile: 58.200 s cold (26.500 s CPU) (for 10.0 s of it some task of the machine waited" in waited
    assert "counted for every task, so it may add up to more than the compile's own time" in waited
    listed = json.loads(_out("runs", "--db", db, "--json"))
    assert {(r["timing_noisy"], r["compile_noisy"]) for r in listed} >= {(1, None), (0, 1)}
    compared = _out("compare", "2.12.0+cpu", "2.13.0+cpu", "--db", db)
    assert "noisy" in compared and "waited" in compared, compared
    junit = tmp_path / "check.xml"
    checked = _out("check", "--db", db, "--junit", str(junit))
    assert "judged:" in checked and "noisy" in checked and "waited" in checked, checked
    as_json = json.loads(_out("check", "--db", db, "--json"))
    assert any("noisy" in json.dumps(j) for j in as_json["judged"]), as_json["judged"]
    assert "noisy" in junit.read_text() and "waited" in junit.read_text()
    site = tmp_path / "site"
    _out("report", "--db", db, "--out", str(site))
    pages = "".join(p.read_text() for p in (site / "runs").glob("*.html"))
    assert NOISY in pages and WAITED in pages
    case = (site / "cases" / "append_last.html").read_text()
    assert "2 timed runs, of which 1 noisy (no latency point); 1 compile waited for a CPU" in case, case
