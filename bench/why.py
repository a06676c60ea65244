"""Whether `diag race --profile` finds where a known extra cost went, with two processes spinning on
both cores (docs/BENCHMARKS.md, "Why it is slower").

    python bench/why.py                       # every part
    python bench/why.py --parts known --trials 5

Parts:
- known: ``--trials`` races of append_last against tests/cases/extra_matmul.py (one torch.mm of
  ``--size`` x ``--size`` per decode step, outside the compiled step), eager backend, fullgraph. The
  matmul's cost alone is timed in a process of its own under the same load, 1 thread as the race runs,
  before each trial: the median of 200 calls, each after 4 MB of other memory was written, so that
  its operands are out of the nearest caches as a decode step leaves them (the median of 200 calls
  back to back, operands hot, is printed beside it: about 10% less). A trial passes where the race's
  top group is matmuls and its difference per token is within 25% of the cost alone.
- between: ``--trials`` races of append_last against tests/cases/busy_between.py (a spin of
  ``--between-ms`` of wall time after each step's compiled call): the between-step figures must
  differ by the spin, within 20%.
- seed: append_last against dynamic_slice on inductor without fullgraph (dynamic_slice's
  data-dependent slice cannot be one graph), one race: how much of the measured difference the rows
  explain, and the rest.
- cost: what --profile adds to a race, per backend of ``--cost-backends`` (inductor, aot_eager and
  eager): ``--cost-trials`` pairs of the same race (append_last against dynamic_slice without
  fullgraph, the default --timing-seconds, inductor's cache warm), with and without --profile, the
  order swapped every other pair; per pair the ratio of wall time and of CPU time (the race's process
  tree), their medians with exact 95% intervals.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import REPO, environ, timed
from honesty import Spinners

from diag.stats import median_interval

CASES = REPO / "tests" / "cases"
RACE = ["--backend", "eager", "--fullgraph", "--new-tokens", "16", "--timing-seconds", "0.5", "--profile", "--json"]
ALONE = """
import statistics, sys, time, torch
torch.set_num_threads(1)
n = int(sys.argv[1])
w = torch.randn(n, n, generator=torch.Generator().manual_seed(0))
other = torch.randn(1 << 20)  # 4 MB: what a decode step's weights and cache pass through the caches
for _ in range(20):
    torch.mm(w, w)
hot, swept = [], []
for _ in range(200):
    start = time.perf_counter()
    torch.mm(w, w)
    hot.append(time.perf_counter() - start)
    other.mul_(1.0)
    start = time.perf_counter()
    torch.mm(w, w)
    swept.append(time.perf_counter() - start)
print(statistics.median(hot) * 1e3, statistics.median(swept) * 1e3)
"""


def _race(work: Path, cases: list[str], env: dict, extra: list[str] = RACE) -> dict:
    command = [sys.executable, "-m", "diag", "race", *(a for c in cases for a in ("--case", c)), *extra]
    _, out = timed([*command, "--db", str(work / "why.db")], env, work)
    (raced,) = json.loads(out)["races"]
    return raced


def _alone_ms(size: int) -> tuple[float, float]:
    """The matmul's median ms alone: called back to back (its operands in the nearest caches), and
    each call after 4 MB of other memory was written (its operands out of them, as a decode step
    leaves them)."""
    done = subprocess.run([sys.executable, "-c", ALONE, str(size)], capture_output=True, text=True, check=True)
    hot, swept = (float(word) for word in done.stdout.split())
    return hot, swept


def known(work: Path, trials: int, size: int) -> list[str]:
    env = environ(DIAG_TEST_EXTRA_MM=str(size))
    lines, passed = [], 0
    for trial in range(1, trials + 1):
        hot, alone = _alone_ms(size)
        raced = _race(work, ["append_last", str(CASES / "extra_matmul.py")], env)
        found = raced["profile"]["extra_matmul"]
        top = found["groups"][0]
        verdict = raced["verdicts"][0]
        close = abs(top["diff_ms"] - alone) <= 0.25 * alone
        ok = top["name"] == "matmuls" and close
        passed += ok
        share = found["explained_ms"] / found["measured_ms"] if found.get("measured_ms") else None
        lines.append(
            f"  trial {trial:>2}: top {top['name']} {top['diff_ms']:+.3f} ms/token (95% {top['low']:+.3f} to "
            f"{top['high']:+.3f}); matmul alone {alone:.3f} ms ({top['diff_ms'] / alone - 1:+.0%}; back to back "
            f"{hot:.3f} ms, {top['diff_ms'] / hot - 1:+.0%}); race "
            f"x{verdict['ratio']:.3f} {verdict['verdict']}; explained "
            f"{'-' if share is None else f'{share:.0%}'}; {'pass' if ok else 'FAIL'}"
        )
        print(lines[-1], flush=True)
    return [f"known: {passed} of {trials} trials name matmuls first, within 25% of the matmul alone", *lines]


def between(work: Path, trials: int, spin_ms: float) -> list[str]:
    env = environ(DIAG_TEST_BETWEEN_MS=str(spin_ms))
    lines, passed, moves = [], 0, []
    for trial in range(1, trials + 1):
        raced = _race(work, ["append_last", str(CASES / "busy_between.py")], env)
        figures = raced["between_ms"]
        moved = figures["busy_between"] - figures["append_last"]
        moves.append(moved)
        ok = abs(moved - spin_ms) <= 0.2 * spin_ms
        passed += ok
        lines.append(
            f"  trial {trial:>2}: between steps {figures['busy_between']:.3f} vs {figures['append_last']:.3f} ms: "
            f"moved {moved:.3f} ms for a {spin_ms:.1f} ms spin ({moved / spin_ms - 1:+.0%}); {'pass' if ok else 'FAIL'}"
        )
        print(lines[-1], flush=True)
    said = f"between: {passed} of {trials} trials within 20% of the spin; median move {statistics.median(moves):.3f} ms"
    return [said, *lines]


def seed(work: Path) -> list[str]:
    extra = ["--backend", "inductor", "--no-fullgraph", "--new-tokens", "16", "--timing-seconds", "1", "--profile"]
    raced = _race(work, ["append_last", "dynamic_slice"], environ(), [*extra, "--json"])
    verdict = raced["verdicts"][0]
    found = raced["profile"].get("dynamic_slice")
    if found is None:
        return [f"seed: dynamic_slice was not raced: {verdict.get('error')}"]
    share = found["explained_ms"] / found["measured_ms"] if found.get("measured_ms") else None
    rows = "; ".join(f"{r['name']} {r['diff_ms']:+.3f}{'' if r['explains'] else ' (holds 0)'}" for r in found["groups"])
    return [
        f"seed: dynamic_slice / append_last x{verdict['ratio']:.3f} ({verdict['verdict']}), measured "
        f"{found['measured_ms']:+.3f} ms/token; rows explain {found['explained_ms']:+.3f} "
        f"({'-' if share is None else f'{share:.0%}'})",
        f"  rows (ms/token): {rows}",
        f"  between steps: {raced['between_ms']}",
        f"  kernels: {found['kernels']}",
    ]


def _cost_of(command: list[str], env: dict, work: Path) -> tuple[float, float]:
    """Wall and CPU seconds (the command's process tree) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, _ = timed(command, env, work)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cost(work: Path, trials: int, backend: str) -> list[str]:
    race = [sys.executable, "-m", "diag", "race", "--case", "append_last", "--case", "dynamic_slice"]
    race += ["--backend", backend, "--no-fullgraph", "--new-tokens", "16", "--db", str(work / "cost.db")]
    env = environ()
    _cost_of(race, env, work)  # inductor's cache filled, so that no side pays the cold compile
    walls, cpus, lines = [], [], []
    for trial in range(1, trials + 1):
        order = [False, True] if trial % 2 else [True, False]
        found = {profiled: _cost_of(race + (["--profile"] if profiled else []), env, work) for profiled in order}
        (plain_wall, plain_cpu), (prof_wall, prof_cpu) = found[False], found[True]
        walls.append(prof_wall / plain_wall)
        cpus.append(prof_cpu / plain_cpu)
        lines.append(
            f"  pair {trial:>2}: race {plain_wall:.1f} s wall / {plain_cpu:.1f} CPU-s, race --profile "
            f"{prof_wall:.1f} s / {prof_cpu:.1f} CPU-s: x{walls[-1]:.2f} wall, x{cpus[-1]:.2f} CPU"
        )
        print(lines[-1], flush=True)

    def said(ratios: list[float]) -> str:
        interval = median_interval(ratios)
        within = f" (95% {interval[0]:.2f}-{interval[1]:.2f})" if interval else ""
        return f"x{statistics.median(ratios):.2f}{within}, {min(ratios):.2f}-{max(ratios):.2f}"

    head = f"cost ({backend}): race --profile against race, {trials} pairs: wall {said(walls)}; CPU {said(cpus)}"
    return [head, *lines]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="known,between,seed,cost")
    parser.add_argument("--cost-trials", type=int, default=6, help="pairs of races with and without --profile (cost)")
    parser.add_argument("--cost-backends", default="inductor,aot_eager,eager", help="the backends cost races on")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--size", type=int, default=224, help="the extra matmul's side (known)")
    parser.add_argument("--between-ms", type=float, default=1.0, help="the spin between steps (between)")
    args = parser.parse_args()
    parts = args.parts.split(",")
    with tempfile.TemporaryDirectory(prefix="diag-bench-why-") as tmp, Spinners(2):
        work = Path(tmp)
        for part in parts:
            if part == "known":
                said = known(work, args.trials, args.size)
            elif part == "between":
                said = between(work, args.trials, args.between_ms)
            elif part == "seed":
                said = seed(work)
            elif part == "cost":
                said = [line for b in args.cost_backends.split(",") for line in cost(work, args.cost_trials, b)[:1]]
            else:
                raise SystemExit(f"unknown part {part!r}: known, between, seed, cost")
            print("\n".join(said if part in ("seed", "cost") else said[:1]), flush=True)


if __name__ == "__main__":
    main()
