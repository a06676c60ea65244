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
  costs; a second, with the loop sized to ``--inject`` (3%) of the count, is judged against the
  spread part's runs as `diag check` judges two builds (regress.compare_runs and regress.regressions
  with the default thresholds): the slowdown must be caught, and the spread part's runs against
  each other must not be.
The counts are taken by whichever method the host offers (callgrind here: minutes a run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import BENCH, REPO, environ, timed
from honesty import Spinners

sys.path.insert(0, str(REPO))
from diag.verdicts import regress

SITE = BENCH / "instr_site"
ROW = ["--case", "append_last", "--backend", "eager", "--fullgraph", "--no-timing", "--new-tokens", "4"]
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


def spread(work: Path, db: Path, repeat: int) -> tuple[list[dict], list[str]]:
    with Spinners(2):
        runs = [_counted(work, db) for _ in range(repeat)]
    counts = [r["compile_instructions"] for r in runs]
    width = (max(counts) - min(counts)) / min(counts)
    lines = [
        f"spread: {repeat} counts of one row ({runs[0]['instructions_method']}) with two processes spinning "
        f"on both cores: {', '.join(f'{c:,}' for c in counts)}",
        f"  spread (max - min) / min = {width:.4%}; median {statistics.median(counts):,.0f}",
    ]
    return runs, lines


def inject(work: Path, db: Path, base: list[dict], fraction: float) -> list[str]:
    median = statistics.median(r["compile_instructions"] for r in base)
    trial = _counted(work, db, TRIAL_ITERATIONS)
    per_iteration = (trial["compile_instructions"] - median) / TRIAL_ITERATIONS
    if per_iteration <= 0:
        return [f"inject: the trial loop added no instructions ({trial['compile_instructions']:,} vs {median:,.0f})"]
    iterations = max(1, round(fraction * median / per_iteration))
    injected = _counted(work, db, iterations)
    ratio = injected["compile_instructions"] / median
    thresholds = regress.Thresholds()
    caught = regress.regressions(regress.compare_runs(base[-1], injected), thresholds, set())
    false_alarms = [
        found
        for before in base
        for after in base
        if before is not after
        for found in regress.regressions(regress.compare_runs(before, after), thresholds, set())
    ]
    return [
        f"inject: {per_iteration:.1f} instructions per loop iteration (trial of {TRIAL_ITERATIONS:,}); "
        f"{iterations:,} iterations per compiled frame for {fraction:.0%}",
        f"  injected count {injected['compile_instructions']:,}: x{ratio:.4f} of the median; check at "
        f"x{thresholds.instructions_ratio}: {'caught' if caught else 'MISSED'} "
        f"({'; '.join(r.message for r in caught)})",
        f"  the spread runs judged against each other (A/A, {len(base) * (len(base) - 1)} pairs): "
        f"{len(false_alarms)} false alarms",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="spread,inject")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--inject", type=float, default=0.03, help="the extra compile work, as a fraction")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    with tempfile.TemporaryDirectory(prefix="diag-bench-instr-") as tmp:
        work = Path(tmp)
        db = work / "instr.db"
        runs, lines = spread(work, db, args.repeat)
        for line in lines:
            print(line, flush=True)
        if "inject" in parts:
            for line in inject(work, db, runs, args.inject):
                print(line, flush=True)


if __name__ == "__main__":
    main()
