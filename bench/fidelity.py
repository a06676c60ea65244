"""Part 4 of bench/run.py: timing fidelity (the machine's own steadiness, A/A false alarms, A/B detection)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from common import BENCH, environ, leg_option, timed

STEADINESS = """
import statistics, sys, time, torch
torch.set_num_threads(1)
x = torch.randn(64, 64)
def work():
    y = x
    for _ in range(40):
        y = torch.tanh(y @ x)
for _ in range(200):
    work()
windows, end = [], time.perf_counter() + float(sys.argv[1])
while time.perf_counter() < end:
    start, samples = time.perf_counter(), []
    while time.perf_counter() - start < 0.25:
        t = time.perf_counter(); work(); samples.append(time.perf_counter() - t)
    windows.append(statistics.median(samples))
print(min(windows), statistics.median(windows), max(windows), len(windows))
"""


def steadiness(seconds: float) -> dict:
    """How much this machine's speed drifts on its own: a fixed workload, one thread, timed in windows."""
    _, out = timed([sys.executable, "-c", STEADINESS, str(seconds)])
    low, mid, high, count = (float(v) for v in out.split())
    return {
        "seconds": seconds,
        "windows": int(count),
        "min_ms": low * 1e3,
        "median_ms": mid * 1e3,
        "max_ms": high * 1e3,
    }


def fidelity(work: Path, repetitions: int, runs: int, seconds: float, new_tokens: int, repeats: int) -> dict:
    """Per repetition, in a fresh DB: an invocation of ``runs`` runs (A), the same again (A'), then
    the same with every decode step 10% slower (B); `diag check` after A' (A/A) and after B (A/B)."""
    case = str(BENCH / "cases" / "extra_cost.py")
    common = [
        "--case",
        case,
        "--backend",
        "eager",
        "--fullgraph",
        "--new-tokens",
        str(new_tokens),
        "--repeats",
        str(repeats),
        "--timing-seconds",
        str(seconds),
        "--threads",
        leg_option("--threads"),
        "--repeat",
        str(runs),
        "--json",
    ]
    medians, ratios, bases, false_alarms, detected = [], {"aa": [], "ab": []}, set(), 0, 0
    inconclusive = {"aa": 0, "ab": 0}
    noisy = {"aa": 0, "ab": 0}
    alarms: list[str] = []
    work.mkdir(parents=True, exist_ok=True)
    for index in range(repetitions):
        db = work / f"fidelity{index}.db"
        for label, slowdown in (("base", "0"), ("aa", "0"), ("ab", "0.10")):
            _, out = timed(
                [sys.executable, "-m", "diag", "run", *common, "--db", str(db)],
                environ(DIAG_BENCH_SLOWDOWN=slowdown),
                work,
            )
            if label != "ab":
                medians += [run["compiled_ms_per_token"] for run in json.loads(out)]
            if label == "base":
                continue
            done = subprocess.run(
                [sys.executable, "-m", "diag", "check", "--db", str(db)], capture_output=True, cwd=work
            )
            compared = json.loads(
                subprocess.run(
                    [sys.executable, "-m", "diag", "compare", "build:1", "build:1", "--db", str(db), "--json"],
                    capture_output=True,
                    text=True,
                    cwd=work,
                ).stdout
            )
            changes = {t["metric"]: t for t in compared["rows"][0]["timings"]}
            # a side whose every run was noisy is not compared (None here, "noisy" in the table)
            ratios[label].append(
                tuple((changes.get(f"{mode}_s_per_token") or {}).get("ratio") for mode in ("eager", "compiled"))
            )
            bases.update(t["basis"] for t in changes.values() if t["metric"] == "compiled_s_per_token")
            noisy[label] += bool(compared["rows"][0].get("noisy"))
            # exit 1: a regression; 3: a slowdown too few runs could judge (never a regression)
            inconclusive[label] += done.returncode == 3
            if label == "aa":
                false_alarms += done.returncode == 1
                if done.returncode == 1:  # what it claimed: a latency, compile-time, status or key row
                    alarms.append(
                        next(
                            (
                                line.strip()
                                for line in done.stdout.decode(errors="replace").splitlines()
                                if line.startswith("REGRESSION")
                            ),
                            "exit 1 without a REGRESSION line",
                        )
                    )
            else:
                detected += done.returncode == 1
    spread = (max(medians) - min(medians)) / statistics.median(medians)
    return {
        "repetitions": repetitions,
        "runs": runs,
        "median_ms": statistics.median(medians),
        "spread": spread,
        "cv": statistics.pstdev(medians) / statistics.mean(medians),
        "false_alarms": false_alarms,
        "detected": detected,
        "inconclusive": inconclusive,
        "noisy": noisy,
        "ratios": ratios,
        "bases": sorted(bases),
        "alarms": alarms,
        "count": len(medians),
    }
