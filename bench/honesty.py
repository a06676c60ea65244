"""Whether diag's performance figures can be trusted on a busy machine (docs/BENCHMARKS.md, "Honest timing").

    python bench/honesty.py                      # every part
    python bench/honesty.py --parts memory --trials 2

Parts:
- busy: the README's first command (`diag run --case append_last`), ``--idle`` times on the machine as
  it is, then ``--busy`` times while two processes spin on both cores. A busy run passes when it
  prints an eager/compiled ratio within 1.5x of the idle runs' median ratio, or says its timing
  is noisy, and a compile time within 1.3x of the idle runs' median, or says the compile waited;
  an idle run passes when each median's 95% interval is within +-10% and it is not noisy.
- mixed: as busy, but beside what a shared runner holds: a package install, an inductor compile from a
  cold cache and a test run, each in a loop (``MixedLoad``). A run passes as a busy one does.
- variants: the same case under two names (bench/cases/extra_cost.py and extra_cost_twin.py),
  `diag run --case A --case B --repeat 5`, then `diag compare --case A --case B`: ``--trials``
  times as A/A (want "no difference") and as A/B with the twin 5% slower (want "slower").
- race: the same two cases raced in one probe (`diag race --case A --case B`), ``--trials`` times
  as A/A and as A/B with the twin 5% slower; with ``--spin N``, N processes spin meanwhile.
- memory: tests/cases/holds_memory.py twice: each mode's peak measured twice, and the compiled
  mode's 100 MB more.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import BENCH, REPO, environ, timed

CASES = BENCH / "cases"


def _run(work: Path, db: Path, *args: str, **env: str) -> list[dict]:
    _, out = timed([sys.executable, "-m", "diag", "run", *args, "--db", str(db), "--json"], environ(**env), work)
    return json.loads(out)


class Spinners:
    """``count`` processes that keep a core busy each, for the length of a with block."""

    def __init__(self, count: int) -> None:
        self.count, self.procs = count, []

    def __enter__(self) -> Spinners:
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.count)]
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


INDUCTOR_LOOP = """
import os, tempfile, torch
while True:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="diag-mixed-inductor-")
    torch._dynamo.reset()
    step = torch.compile(lambda x: (x.sin() @ x.T).relu().sum(), backend="inductor")
    step(torch.randn(64, 64))
"""


class MixedLoad:
    """What a shared runner holds beside a timed run: a package install (diag's own wheel installed
    into a fresh folder, again and again), an inductor compile from a cold cache (its C++ compiler
    and workers), and a test run (the fast tier's report tests), each in a loop."""

    def __init__(self, work: Path) -> None:
        self.work, self.procs = work, []

    def __enter__(self) -> MixedLoad:
        wheels = self.work / "wheels"
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), REPO],
            check=True,
        )
        (wheel,) = wheels.glob("*.whl")
        install = (
            f"while true; do rm -rf {self.work}/target; {sys.executable} -m pip install -q --no-deps --no-index "
            f"--target {self.work}/target {wheel}; done"
        )
        pytest = f"{sys.executable} -m pytest -q -p no:cacheprovider -m 'not slow' tests/test_report_story.py"
        tests = f"while true; do {pytest}; done"
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "start_new_session": True}
        self.procs = [
            subprocess.Popen(["bash", "-c", install], **quiet),
            subprocess.Popen([sys.executable, "-c", INDUCTOR_LOOP], **quiet),
            subprocess.Popen(["bash", "-c", tests], cwd=REPO, **quiet),
        ]
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs:  # each loop with what it started (pip, the compiler, pytest's workers)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _ratio(run: dict) -> float | None:
    eager, compiled = run.get("eager_ms_per_token"), run.get("compiled_ms_per_token")
    return eager / compiled if eager and compiled else None


def _reach(run: dict) -> float:
    """How far the wider of the two intervals reaches from its median, as a fraction."""
    reach = 0.0
    for mode in ("eager", "compiled"):
        median, low, high = (run.get(f"{mode}_ms_{end}") for end in ("per_token", "low", "high"))
        if median and low is not None:
            reach = max(reach, (median - low) / median, (high - median) / median)
    return reach


def busy(work: Path, idle_runs: int, busy_runs: int, mixed: bool = False) -> list[str]:
    """The README's first command idle, then beside two spinning processes (or ``mixed``: a package
    install, an inductor compile and a test run)."""
    db = work / ("mixed.db" if mixed else "busy.db")
    idle = [_run(work, db, "--case", "append_last")[0] for _ in range(idle_runs)]
    with MixedLoad(work) if mixed else Spinners(2):
        loaded = [_run(work, db, "--case", "append_last")[0] for _ in range(busy_runs)]
    reference = statistics.median(r for r in map(_ratio, idle) if r)
    honest = [r["timing_noisy"] or (_ratio(r) and 1 / 1.5 <= _ratio(r) / reference <= 1.5) for r in loaded]
    # compile time: within 1.3x of the idle runs' median, or marked noisy (it waited for the machine)
    compile_idle = statistics.median(r["compile_s"] for r in idle if r.get("compile_s") is not None)
    compile_honest = [r.get("compile_noisy") or r["compile_s"] <= 1.3 * compile_idle for r in loaded]
    lines = [
        "| machine | run | eager / compiled ms/token | ratio | widest interval | noisy | "
        "compile s (CPU s; stalled s) | compile noisy |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, runs in (("idle", idle), ("mixed load" if mixed else "2 cores spinning", loaded)):
        for index, run in enumerate(runs, 1):
            ratio = _ratio(run)
            lines.append(
                f"| {label} | {index} | {run['eager_ms_per_token']:.3f} / {run['compiled_ms_per_token']:.3f} | "
                f"{'-' if ratio is None else f'{ratio:.2f}'} | +-{_reach(run):.1%} | "
                f"{run['timing_note'] if run['timing_noisy'] else 'no'} | "
                f"{run['compile_s']:.1f} ({run.get('compile_cpu_s') or 0:.1f}; "
                f"{'-' if run.get('compile_stall_s') is None else format(run['compile_stall_s'], '.1f')}) | "
                f"{run['compile_note'] if run.get('compile_noisy') else 'no'} |"
            )
    steady_idle = sum(1 for r in idle if not r["timing_noisy"] and _reach(r) <= 0.10)
    lines += [
        "",
        f"Idle: {steady_idle} of {len(idle)} runs steady with every interval within +-10% (median ratio "
        f"{reference:.2f}). Busy: {sum(map(bool, honest))} of {len(loaded)} runs either within 1.5x of the "
        f"idle ratio or marked noisy ({sum(r['timing_noisy'] for r in loaded)} marked noisy). Compile: "
        f"{sum(map(bool, compile_honest))} of {len(loaded)} busy runs within 1.3x of the idle median "
        f"({compile_idle:.1f} s) or marked noisy ({sum(bool(r.get('compile_noisy')) for r in loaded)} marked noisy).",
    ]
    return lines


def variants(work: Path, trials: int) -> list[str]:
    cases = ["--case", str(CASES / "extra_cost.py"), "--case", str(CASES / "extra_cost_twin.py")]
    common = [*cases, "--backend", "eager", "--fullgraph", "--new-tokens", "8", "--repeat", "5"]
    common += ["--timing-seconds", "0.5"]
    found = {"aa": [], "ab": []}
    for trial in range(trials):
        for label, slowdown in (("aa", "0"), ("ab", "0.05")):
            db = work / f"variants-{label}-{trial}.db"
            _run(work, db, *common, DIAG_BENCH_SLOWDOWN_TWIN=slowdown)
            _, out = timed(
                [sys.executable, "-m", "diag", "compare", "--case", "bench_extra_cost", "--case",
                 "bench_extra_cost_twin", "--db", str(db), "--json"],
                environ(),
                work,
            )  # fmt: skip
            point = next(p for p in json.loads(out)["points"] if p["mode"] == "compiled")
            found[label].append(point)

    aa = sum(p["verdict"] == "no difference" for p in found["aa"])
    ab = sum(p["verdict"] == "slower" for p in found["ab"])
    return [
        "| trial kind | compiled ratio twin / original (95% interval) and verdict, per trial | wanted |",
        "|---|---|---|",
        f"| A/A | {_said(found['aa'])} | no difference: {aa} of {trials} |",
        f"| A/B, twin 5% slower | {_said(found['ab'])} | slower: {ab} of {trials} |",
    ]


def _said(points: list[dict]) -> str:
    return ", ".join(
        f"{p['ratio']:.3f} ({p['low']:.3f}-{p['high']:.3f}) {p['verdict']}" if p["low"] is not None else p["verdict"]
        for p in points
    )


def races(work: Path, trials: int, spin: int) -> list[str]:
    args = [sys.executable, "-m", "diag", "race", "--case", str(CASES / "extra_cost.py")]
    args += ["--case", str(CASES / "extra_cost_twin.py"), "--backend", "eager", "--fullgraph", "--new-tokens", "8"]
    args += ["--json"]
    found: dict[str, list[dict]] = {"aa": [], "ab": []}
    seconds: list[float] = []
    loads: list[float] = []
    with Spinners(spin):
        for _ in range(trials):
            for label, slowdown in (("aa", "0"), ("ab", "0.05")):
                took, out = timed(args, environ(DIAG_BENCH_SLOWDOWN_TWIN=slowdown), work)
                raced = json.loads(out)["races"][0]
                found[label].append(raced["verdicts"][0])
                seconds.append(took)
                loads.append(raced["load_1m"] or 0.0)
    aa = sum(p["verdict"] == "no difference" for p in found["aa"])
    ab = sum(p["verdict"] == "slower" for p in found["ab"])
    rounds = [p["rounds"] for p in found["aa"] + found["ab"]]
    return [
        "| trial kind | twin / original per round, median (95% interval) and verdict, per trial | wanted |",
        "|---|---|---|",
        f"| A/A | {_said(found['aa'])} | no difference: {aa} of {trials} |",
        f"| A/B, twin 5% slower | {_said(found['ab'])} | slower: {ab} of {trials} |",
        "",
        f"{spin} spinning processes; {min(rounds)}-{max(rounds)} rounds per race; each `diag race` "
        f"{min(seconds):.1f}-{max(seconds):.1f} s wall; load average {min(loads):.1f}-{max(loads):.1f}.",
    ]


def memory(work: Path, trials: int) -> list[str]:
    db = work / "memory.db"
    case = str(REPO / "tests" / "cases" / "holds_memory.py")
    args = ["--case", case, "--backend", "eager", "--fullgraph", "--new-tokens", "8", "--repeat", str(trials)]
    runs = _run(work, db, *args, "--timing-seconds", "0")
    lines = ["| run | memory kind | eager MB | compiled MB | compiled - eager |", "|---|---|---|---|---|"]
    for index, run in enumerate(runs, 1):
        eager, compiled = run["peak_mem_eager_mb"], run["peak_mem_compiled_mb"]
        lines.append(f"| {index} | {run['memory_kind']} | {eager:.2f} | {compiled:.2f} | {compiled - eager:+.1f} MB |")
    compiled = [r["peak_mem_compiled_mb"] for r in runs]
    lines += [
        "",
        f"Compiled peak over {len(runs)} runs: {min(compiled):.1f}-{max(compiled):.1f} MB "
        f"(spread {(max(compiled) - min(compiled)) / statistics.median(compiled):.1%}); the case holds 100 MB.",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="busy,mixed,variants,race,memory")
    parser.add_argument("--spin", type=int, default=0, help="race: processes that spin during the races")
    parser.add_argument("--idle", type=int, default=4, help="busy: runs on the machine as it is")
    parser.add_argument("--busy", type=int, default=10, help="busy: runs while two processes spin")
    parser.add_argument("--trials", type=int, default=20, help="variants: A/A and A/B trials; memory: runs")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="diag-honesty-") as tmp:
        work = Path(tmp)
        if "busy" in parts:
            lines += ["### Busy machine: the README's first command", "", *busy(work, args.idle, args.busy), ""]
        if "mixed" in parts:
            lines += ["### Mixed load: the README's first command", ""]
            lines += [*busy(work, args.idle, args.busy, mixed=True), ""]
        if "variants" in parts:
            lines += [
                "### Variant against variant (`diag compare --case A --case B`)",
                "",
                *variants(work, args.trials),
            ]
            lines.append("")
        if "race" in parts:
            lines += ["### Variants raced in one process (`diag race --case A --case B`)", ""]
            lines += [*races(work, args.trials, args.spin), ""]
        if "memory" in parts:
            lines += ["### Peak memory per mode (`rss_rise`)", "", *memory(work, min(args.trials, 5)), ""]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
