"""The timing pass: forked from the same import as the diagnosis, logging off, raw samples stored."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TEST_CASES, diag, show

from diag.noise import NOT_COMPARED

pytestmark = pytest.mark.slow  # real probes with timing passes

FAST = ["--backend", "eager", "--new-tokens", "4", "--prompt-length", "6", "--repeats", "2"]


def _run_dirs(db):
    return sorted(p for p in db.with_suffix(".runs").iterdir() if p.is_dir())


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "fresh-interpreters"])
def test_timing_pass_stores_latency_samples_and_compile_time(tmp_path, fork):
    db = tmp_path / "t.db"
    env = None if fork else {**os.environ, "DIAG_PROBE_NO_FORK": "1"}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "diag",
            "run",
            "--case",
            "append_last",
            "--backend",
            "aot_eager",
            "--fullgraph",
            "--new-tokens",
            "5",
            "--repeats",
            "3",
            "--timing-seconds",
            "0",
            "--db",
            str(db),
        ],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        timeout=900,
    )
    run = show(db, 1, tmp_path)
    assert run["status"] == "pass"
    assert run["eager_ms_per_token"] > 0 and run["compiled_ms_per_token"] > 0
    assert run["compile_s"] is not None and run["compile_s"] >= 0
    assert run["compile_cpu_s"] is not None and run["compile_cpu_s"] >= 0 and run["compile_noisy"] in (0, 1)
    # the seconds of the compile in which some task waited for a CPU, where the kernel says (PSI)
    assert (run["compile_stall_s"] is not None) == Path("/proc/pressure/cpu").exists()
    assert run["compile_stall_s"] is None or 0 <= run["compile_stall_s"] <= run["compile_s"] + 1
    assert run["peak_mem_eager_mb"] >= 0 and run["memory_kind"] == "rss_rise"  # the rise over the mode's own start
    assert run["timing_error"] is None
    samples = {(t["mode"], t["metric"]): t["samples"] for t in run["timings"]}
    # 3 repeats x (5 - 1) decode steps each, and the host timed once after each generation.
    for mode in ("eager", "compiled"):
        assert len(samples[(mode, "decode_step")]) == 12
        assert len(samples[(mode, "generation")]) == 3 and len(samples[(mode, "host_reference")]) == 3
        assert all(s > 0 for s in samples[(mode, "host_reference")])
    assert "time.stderr.txt" in run["artifacts"]
    assert "torch_debug.log" in run["artifacts"]
    (run_dir,) = _run_dirs(db)
    passes = [json.loads(line) for line in (run_dir / "passes.jsonl").read_text().splitlines()]
    assert [(p["name"], p["returncode"]) for p in passes] == [("time", 0), ("diagnose", 0)]
    # Only the diagnosis pass writes a structured trace: the timing pass runs with it turned off.
    assert len(list((run_dir / "trace").glob("*.log"))) == 1
    # torch's per-frame compilation metrics, every field (bulky ones as a digest) on the frame, and
    # the guard check a decode call pays, from the timing pass's own metrics
    (frame,) = run["frames"]
    metrics = json.loads(frame["metrics"])
    assert len(metrics) > 50 and metrics["guard_latency_us"] > 0 and metrics["compile_id"] == frame["compile_id"]
    assert set(metrics["inductor_config"]) == {"sha256", "chars"}
    timed = [json.loads(line) for line in (run_dir / "time.jsonl").read_text().splitlines()]
    (recorded,) = [r for r in timed if r.get("kind") == "compile_metrics"]
    (cold,) = recorded["frames"]  # fullgraph: one frame, compiled once
    assert run["guard_latency_us"] == cold["guard_latency_us"]
    assert (
        f"guard check per decode call {run['guard_latency_us']:.0f} us"
        in diag("show", "1", "--db", str(db), cwd=tmp_path).stdout
    )


def test_a_case_that_does_not_compile_is_timed_eagerly_only(tmp_path):
    db = tmp_path / "f.db"
    diag("run", "--case", "dynamic_slice", "--fullgraph", *FAST, "--db", str(db), cwd=tmp_path)
    run = show(db, 1, tmp_path)
    assert run["status"] == "fullgraph_error"
    assert run["eager_ms_per_token"] > 0
    assert run["compiled_ms_per_token"] is None and run["compile_s"] is None
    # The compile failure is the run's own error; the timing pass does not report it twice.
    assert run["timing_error"] is None
    assert {t["mode"] for t in run["timings"]} == {"eager"}


def test_crash_and_hang_with_timing_store_no_timings_and_leave_no_process(tmp_path):
    db = tmp_path / "c.db"
    done = diag(
        "run",
        "--case",
        str(TEST_CASES / "segfault.py"),
        "--case",
        str(TEST_CASES / "hang.py"),
        "--fullgraph",
        *FAST,
        "--timeout",
        "18",
        "--db",
        str(db),
        "--json",
        cwd=tmp_path,
    )
    runs = {r["case"]: r for r in json.loads(done.stdout)}
    assert runs["segfault"]["status"] == "crash" and runs["hang"]["status"] == "timeout"
    for case in ("segfault", "hang"):
        run = show(db, runs[case]["id"], tmp_path)
        assert run["timings"] == [] and run["eager_ms_per_token"] is None and run["timing_error"] is None
    crash = show(db, runs["segfault"]["id"], tmp_path)
    assert crash["signal"] == 11 and "about to crash" in crash["stderr_tail"]
    for run_dir in _run_dirs(db):
        passes = [json.loads(line) for line in (run_dir / "passes.jsonl").read_text().splitlines()]
        assert [p["name"] for p in passes] == ["time", "diagnose"]
    listing = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    assert [line for line in listing.splitlines() if str(tmp_path) in line and "diag.probe" in line] == []


def test_timing_seconds_and_repeat_spread_the_samples_and_check_pools_an_invocation(tmp_path):
    db = tmp_path / "t.db"
    common = [
        *FAST,
        "--case",
        "append_last",
        "--fullgraph",
        "--threads",
        "1",
        "--timing-seconds",
        "0.5",
        "--db",
        str(db),
    ]
    diag("run", *common, "--repeat", "2", cwd=tmp_path)
    first, second = show(db, 1, tmp_path), show(db, 2, tmp_path)
    assert first["invocation"] and first["invocation"] == second["invocation"]
    samples = {(t["mode"], t["metric"]): t["samples"] for t in first["timings"]}
    for mode in ("eager", "compiled"):
        generations = samples[(mode, "generation")]
        # Far more than --repeats 2: the timed generations (each followed by its host reference) go on
        # until half a second of wall time has passed. That half second also holds each generation's
        # recording, a tenth of it on an idle machine (0.45 s of samples seen) and more on a loaded
        # one, so the samples are held to most of it, not all.
        assert len(generations) > 2 and sum(generations) + sum(samples[(mode, "host_reference")]) >= 0.3
        assert len(samples[(mode, "decode_step")]) == 3 * len(generations)
        assert len(samples[(mode, "host_reference")]) == len(generations)
    # One invocation on one build: nothing to compare against yet.
    verdict = json.loads(diag("check", "--db", str(db), "--json", cwd=tmp_path).stdout)
    assert verdict["regressions"] == []
    diag("run", *common, cwd=tmp_path)
    compared = json.loads(diag("compare", "build:1", "build:1", "--db", str(db), "--json", cwd=tmp_path).stdout)
    (row,) = compared["rows"]
    assert (row["before_run"], row["after_run"]) == (2, 3)
    latency = {t["metric"]: t for t in row["timings"]}
    # A run the machine made noisy (another test beside this one, a busy runner) is left out of the
    # pool, as check and compare leave it out; a side with no steady run is NOT COMPARED, and says so.
    steady = {i: not show(db, i, tmp_path)["timing_noisy"] for i in (1, 2, 3)}
    if steady[3] and (steady[1] or steady[2]):
        assert latency["compiled_s_per_token"]["basis"] == "host-adjusted"
        pooled = (latency["compiled_s_per_token"]["runs_before"], latency["compiled_s_per_token"]["runs_after"])
        assert pooled == (steady[1] + steady[2], 1)
    else:
        assert "compiled_s_per_token" not in latency
        assert any(note.startswith(f"compiled latency {NOT_COMPARED}:") for note in row["noisy"]), row["noisy"]
    # the side with no steady run, whatever the host did above: the newest run marked noisy, as a
    # busy host marks it
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET timing_noisy = 1 WHERE id = 3")
    compared = json.loads(diag("compare", "build:1", "build:1", "--db", str(db), "--json", cwd=tmp_path).stdout)
    (row,) = compared["rows"]
    assert not {"eager_s_per_token", "compiled_s_per_token"} & {t["metric"] for t in row["timings"]}
    for mode in ("eager", "compiled"):
        assert any(note.startswith(f"{mode} latency {NOT_COMPARED}:") for note in row["noisy"]), row["noisy"]


def test_timing_interleaves_the_modes_and_measures_their_memory_alike(tmp_path):
    """A host that slows down partway is noisy (timed in two blocks, it read as compiled 6x slower);
    a compiled decode that holds 100 MB more shows about 100 MB more; CPU probes default to 1 thread;
    the run records what each pass cost."""
    db = tmp_path / "h.db"
    done = diag(
        "run",
        "--case",
        str(TEST_CASES / "slows_midway.py"),
        "--case",
        str(TEST_CASES / "holds_memory.py"),
        "--fullgraph",
        "--backend",
        "eager",
        "--new-tokens",
        "8",
        "--prompt-length",
        "6",
        "--repeats",
        "6",
        "--timing-seconds",
        "0",
        "--db",
        str(db),
        cwd=tmp_path,
    )
    lines = {line.split()[1]: line for line in done.stdout.splitlines() if line.startswith("#")}
    slowed = lines["slows_midway"]
    assert slowed.endswith(("noisy", "noisy; compile waited")), slowed  # the run line's timing column
    whole = diag("runs", "--db", str(db), "--verbose", cwd=tmp_path).stdout  # and the whole reason
    slowed = next(line for line in whole.splitlines() if "slows_midway" in line)
    assert "timing noisy (" in slowed and "steps in two clusters" in slowed and "not compared" in slowed
    runs = {r["case"]: r for r in json.loads(diag("runs", "--db", str(db), "--json", cwd=tmp_path).stdout)}
    shown = show(db, runs["slows_midway"]["id"], tmp_path)
    assert shown["timing_noisy"] == 1 and shown["compiled_ms_low"] <= shown["compiled_ms_per_token"]
    held = show(db, runs["holds_memory"]["id"], tmp_path)
    assert held["memory_kind"] == "rss_rise"  # (whether its timing is noisy depends on the machine)
    assert 90 <= held["peak_mem_compiled_mb"] - held["peak_mem_eager_mb"] <= 110, held
    assert held["config"]["threads"] == 1
    # what the run cost, on the run: each pass, the orchestrator's own work, torch's logging overhead
    assert held["timing_pass_s"] > 0 and held["diagnosis_pass_s"] > 0 and 0 <= held["orchestrator_s"] < 60
    assert held["logging_overhead_s"] is not None and held["logging_overhead_s"] >= 0  # torch 2.13 reports it
    timing = [json.loads(line) for line in (_run_dirs(db)[0] / "time.jsonl").read_text().splitlines()]
    modes = [(r["mode"], r["order"], r["threads"]) for r in timing if r["kind"] == "timing"]
    assert modes == [("eager", "interleaved", 1), ("compiled", "interleaved", 1)]


@pytest.mark.slow
def test_a_compile_that_shares_its_core_with_busy_processes_is_marked_noisy(tmp_path):
    """The probe and three busy loops pinned to one core: the compile (the sliced cache, recompiled at
    each decode step) gets a share of it, its wall time some times its CPU time. The run keeps both
    figures, its line and show say the compile waited, and the verdict is noisy; the run's CPU time
    is what the compile itself cost."""
    core = {min(os.sched_getaffinity(0))}

    def pinned() -> None:
        os.sched_setaffinity(0, core)

    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pinned) for _ in range(3)]
    try:
        done = subprocess.run(
            # the sliced cache recompiling at each of its 6 steps: seconds of compiling to wait through
            [sys.executable, "-m", "diag", "run", "--case", "dynamic_slice", "--backend", "aot_eager",
             "--no-fullgraph", "--dynamic", "false", "--new-tokens", "6", "--repeats", "1", "--timing-seconds", "0",
             "--db", "t.db"],
            cwd=tmp_path, capture_output=True, text=True, timeout=900, preexec_fn=pinned,
        )  # fmt: skip
    finally:
        for process in busy:
            process.kill()
            process.wait()
    assert done.returncode == 0, done.stderr
    run = show(tmp_path / "t.db", 1, tmp_path)
    assert run["compile_s"] > 1.3 * run["compile_cpu_s"] > 0, (run["compile_s"], run["compile_cpu_s"])
    assert run["compile_noisy"] == 1 and run["compile_note"].startswith("compile waited: "), (
        run["compile_s"],
        run["compile_cpu_s"],
    )
    assert done.stdout.rstrip().endswith("compile waited"), done.stdout  # the run line's timing column
    whole = diag("runs", "--db", "t.db", "--verbose", cwd=tmp_path).stdout
    assert "compile waited: " in whole and NOT_COMPARED in whole
    shown = diag("show", "1", "--db", "t.db", cwd=tmp_path).stdout
    assert "s CPU)" in shown and "no compile-time verdict is drawn from this run" in shown
