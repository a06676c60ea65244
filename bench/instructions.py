"""Whether the cold compile's instruction count holds on a busy machine and catches a little more compile
work (docs/BENCHMARKS.md, "Compile instructions").

    python bench/instructions.py                          # both parts
    python bench/instructions.py --parts spread --repeat 5

Parts:
- spread: `diag run --case append_last --backend eager --fullgraph --no-timing --count-instructions`
  ``--repeat`` times while two processes spin on both cores; the spread is (max - min) / min.
- inject: the same row on a "build" whose dynamo does extra work for every frame it compiles:
  bench/instr_site/sitecustomize.py on PYTHONPATH wraps dynamo's per-frame compile with a loop of
  DIAG_BENCH_EXTRA_WORK iterations. One run with a trial loop gives the instructions an iteration
  costs; ``--injected`` more (default 4), with the loop sized to ``--inject`` (3%) of the count, are
  each judged against each spread run as `diag check` judges two builds (regress.compare_runs and
  regress.regressions with the default thresholds): 5 x 4 = 20 trials. Per trial: whether the
  instruction count caught it, and whether the compile's wall time (the timing pass's, taken
  natively beside the count) did, or was refused as noisy. The spread runs against each other must
  raise nothing.
Every run has two processes spinning on both cores. The counts are taken by whichever method the
host offers (callgrind here: minutes a run); a callgrind count does not depend on the load, so two
runs are counted at a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import BENCH, REPO, environ, timed
from honesty import Spinners

sys.path.insert(0, str(REPO))
from diag.verdicts import regress

SITE = BENCH / "instr_site"
ROW = ["--case", "append_last", "--backend", "eager", "--fullgraph", "--new-tokens", "4"]
TRIAL_ITERATIONS = 200_000


def _counted(work: Path, db: Path, extra_work: int = 0) -> dict:
    """One counted run of the row; its stored record (diag show --json)."""
    env = environ(PYTHONPATH=str(SITE), DIAG_BENCH_EXTRA_WORK=str(extra_work)) if extra_work else environ()
    command = [sys.executable, "-m", "diag", "run", *ROW, "--count-instructions", "--db", str(db), "--json"]
    _, out = timed(command, env, work)
    (listed,) = json.loads(out)
    shown = subprocess.run(
        [sys.executable, "-m", "diag", "show", str(listed["id"]), "--db", str(db), "--json"],
        capture_output=True,
        text=True,
        cwd=work,
        check=True,
    )
    run = json.loads(shown.stdout)
    if not run.get("compile_instructions"):
        raise SystemExit(f"run #{run['id']} counted nothing: {run.get('instructions_note')}")
    return run


def _many(work: Path, db: Path, extra: list[int]) -> list[dict]:
    """Counted runs, ``extra`` work each, two at a time (a count does not depend on the load)."""
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(lambda n: _counted(work, db, n), extra))


def spread(work: Path, db: Path, repeat: int) -> tuple[list[dict], list[str]]:
    runs = _many(work, db, [0] * repeat)
    counts = [r["compile_instructions"] for r in runs]
    width = (max(counts) - min(counts)) / min(counts)
    lines = [
        f"spread: {repeat} counts of one row ({runs[0]['instructions_method']}) with two processes spinning "
        f"on both cores: {', '.join(f'{c:,}' for c in counts)}",
        f"  spread (max - min) / min = {width:.4%}; median {statistics.median(counts):,.0f}",
    ]
    return runs, lines


def _caught(before: dict, after: dict, metric: str) -> tuple[bool, bool]:
    """Whether check raises a slowdown of ``metric`` for ``after`` against ``before``, and whether that
    metric was refused as noisy (no verdict drawn)."""
    thresholds = regress.Thresholds()
    comparison = regress.compare_runs(before, after)
    found = regress.regressions(comparison, thresholds, set())
    caught = any(r.change is not None and r.change.metric == metric for r in found)
    refused = metric == "compile_s" and bool(before.get("compile_noisy") or after.get("compile_noisy"))
    return caught, refused


def inject(work: Path, db: Path, base: list[dict], fraction: float, injected_runs: int) -> list[str]:
    median = statistics.median(r["compile_instructions"] for r in base)
    trial = _counted(work, db, TRIAL_ITERATIONS)
    per_iteration = (trial["compile_instructions"] - median) / TRIAL_ITERATIONS
    if per_iteration <= 0:
        return [f"inject: the trial loop added no instructions ({trial['compile_instructions']:,} vs {median:,.0f})"]
    iterations = max(1, round(fraction * median / per_iteration))
    injected = _many(work, db, [iterations] * injected_runs)
    trials = [(before, after) for after in injected for before in base]
    by_count = sum(_caught(before, after, "compile_instructions")[0] for before, after in trials)
    by_wall = [_caught(before, after, "compile_s") for before, after in trials]
    false_alarms = [
        found
        for before in base
        for after in base
        if before is not after
        for found in regress.regressions(regress.compare_runs(before, after), regress.Thresholds(), set())
        if found.change is not None and found.change.metric in ("compile_instructions", "compile_s")
    ]
    ratios = [r["compile_instructions"] / median for r in injected]
    walls = [r.get("compile_s") for r in (*base, *injected)]
    return [
        f"inject: {per_iteration:.1f} instructions per loop iteration (trial of {TRIAL_ITERATIONS:,}); "
        f"{iterations:,} iterations per compiled frame for {fraction:.0%}",
        f"  {injected_runs} injected counts: x{min(ratios):.4f}-x{max(ratios):.4f} of the median; "
        f"check at x{regress.Thresholds().instructions_ratio}",
        f"  caught on instructions in {by_count} of {len(trials)} trials (each injected run against each spread run)",
        f"  caught on compile wall time in {sum(c for c, _ in by_wall)} of {len(trials)}; "
        f"{sum(r for _, r in by_wall)} of {len(trials)} refused as noisy "
        f"(wall times {', '.join('-' if w is None else f'{w:.1f}' for w in walls)} s)",
        f"  the spread runs judged against each other (A/A, {len(base) * (len(base) - 1)} pairs): "
        f"{len(false_alarms)} false alarms on instructions or compile time",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="spread,inject")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--inject", type=float, default=0.03, help="the extra compile work, as a fraction")
    parser.add_argument("--injected", type=int, default=4, help="injected runs (trials: this x --repeat)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    with tempfile.TemporaryDirectory(prefix="diag-bench-instr-") as tmp:
        work = Path(tmp)
        db = work / "instr.db"
        with Spinners(2):
            runs, lines = spread(work, db, args.repeat)
            for line in lines:
                print(line, flush=True)
            if "inject" in parts:
                for line in inject(work, db, runs, args.inject, args.injected):
                    print(line, flush=True)


if __name__ == "__main__":
    main()
