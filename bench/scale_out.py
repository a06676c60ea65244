"""Scale-out figures: how even the shards of the nightly matrix are, and what a 4-way sharded run
saves against a serial one on this machine.

    python bench/scale_out.py                      # both parts
    python bench/scale_out.py --parts balance      # the shares only (seconds)
    python bench/scale_out.py --parts wall --history my-history.db

balance: the nightly matrix (.github/nightly-matrix.toml, hf:all expanded by the transformers here)
planned into 4, 16 and 64 shards, each row costed by a recorded duration: from --history where it
has the row, otherwise drawn once per row (seeded) from a log-normal around diag's estimate with
sigma 0.8, so that rows differ by about 5x between the 5th and the 95th percentile, as
architectures and backends do. Prints the largest share's estimated cost over the mean share's,
and how many builds were provisioned twice.

wall: one matrix (every built-in case, eager, fullgraph on and off, untimed: 8 runs) run serially,
then as 4 shards started side by side, each into its own DB, then merged; prints both wall times
and checks that the merged verdicts equal the serial ones.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from diag import row as rows  # after sys.path names the repository
from diag.cli import sharding  # after sys.path names the repository
from diag.run import matrix, shard  # after sys.path names the repository
from diag.run.catalog import HF_PREFIX  # after sys.path names the repository

REPO = Path(__file__).resolve().parent.parent
MATRIX = REPO / ".github" / "nightly-matrix.toml"
WALL = ["--case", "all", "--backend", "eager", "--no-timing", "--new-tokens", "8"]


def balance(history: str | None, counts: list[int]) -> list[str]:
    parts = sharding.read_matrix(str(MATRIX))
    matrix.resolve_cases(parts, print)
    costs = matrix.history_costs(history, print)
    rng = random.Random(0)
    drawn = 0
    for part in parts:
        for case in part.refs or []:
            for config in part.configs:
                key = (rows.of_config(asdict(config), case.name, case.source), part.timing)
                if key not in costs:
                    estimate = shard.estimate(config.backend, part.timing, case.name.startswith(HF_PREFIX))
                    costs[key] = estimate * rng.lognormvariate(0.0, 0.8)
                    drawn += 1
    units = matrix.units(parts, costs)
    runs = sum(unit.runs for unit in units)
    lines = [
        f"nightly matrix: {len(parts)} parts, {len(units)} units, {runs} runs; "
        f"{drawn} rows costed by a drawn duration, {len(costs) - drawn} by the history",
        "| shards | largest share | mean share | largest / mean | builds provisioned twice or more | planning |",
        "|---|---|---|---|---|---|",
    ]
    for count in counts:
        start = time.perf_counter()
        planned = shard.balance(units, count)
        took = time.perf_counter() - start
        loads = planned.loads()
        mean = sum(loads) / len(loads)
        held = [{spec for unit in share for spec in unit.specs} for share in planned.shares]
        distinct = {spec for specs in held for spec in specs}
        extra = sum(len(specs) for specs in held) - len(distinct)
        lines.append(
            f"| {count} | {max(loads):.0f} s | {mean:.0f} s | {max(loads) / mean:.3f} | {extra} | {took:.2f} s |"
        )
    return lines


def _verdicts(db: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "diag", "runs", "--db", str(db), "--json", "--limit", "1000"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {(r["case"], r["fullgraph"]): (r["status"], r["graph_break_count"]) for r in json.loads(done.stdout)}


def wall(shards: int) -> list[str]:
    work = Path(tempfile.mkdtemp(prefix="diag-scale-out-"))
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "diag", "run", *WALL, "--db", "serial.db"], cwd=work, check=True, capture_output=True
    )
    serial = time.perf_counter() - start
    start = time.perf_counter()
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "diag", "run", *WALL, "--shard", f"{k}/{shards}", "--db", f"shard-{k}.db"],
            cwd=work,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for k in range(shards)
    ]
    codes = [worker.wait() for worker in workers]
    sharded = time.perf_counter() - start
    subprocess.run(
        [sys.executable, "-m", "diag", "merge", "merged.db", *(f"shard-{k}.db" for k in range(shards))],
        cwd=work,
        check=True,
        capture_output=True,
    )
    same = _verdicts(work / "merged.db") == _verdicts(work / "serial.db")
    return [
        f"matrix: diag run {shlex.join(WALL)} ({len(_verdicts(work / 'serial.db'))} runs), {os.cpu_count()} cores",
        f"serial: {serial:.1f} s; {shards} shards side by side: {sharded:.1f} s (exit codes {codes}); "
        f"speed-up {serial / sharded:.2f}x; merged verdicts equal the serial ones: {same}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="balance,wall")
    parser.add_argument("--history", default=None, help="a diag DB whose recorded durations cost the rows")
    parser.add_argument("--shards", type=int, nargs="*", default=[4, 16, 64])
    args = parser.parse_args()
    wanted = args.parts.split(",")
    if "balance" in wanted:
        print("\n".join(balance(args.history, args.shards)))
    if "wall" in wanted:
        print("\n".join(wall(4)))


if __name__ == "__main__":
    main()
