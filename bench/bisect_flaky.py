"""How often a bisect lands on the right build when the change shows in some runs only, and what it
costs in runs (docs/regressions.md, the bisect's confirmation).

    python bench/bisect_flaky.py                        # 1,000 trials per rate, the default --confirm
    python bench/bisect_flaky.py --trials 100 --rates 0.33,1 --confirm 0,2

Each trial is a history of ``--builds`` builds with its boundary drawn at random; a run of a build at
or after it shows the change with probability RATE, a run before it never does. The search is
diag/searching.py's own (``confirmed_search``), with a seeded stand-in for the runs: no torch build
that fails one run in three exists to install. A trial is right where the last good and first bad
builds are the two either side of the boundary; one the search refuses (the bad end never differed)
counts as wrong.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys

from common import REPO

sys.path.insert(0, str(REPO))
from diag import searching


def trial(seed: int, rate: float, builds: int, confirm: int) -> tuple[bool, int]:
    rng = random.Random(seed)
    names = [f"b{index:04d}" for index in range(builds)]
    boundary = rng.randrange(1, builds)
    runs = [0]

    def read(spec: str, index: int) -> str:
        runs[0] += 1
        return "bad" if names.index(spec) >= boundary and rng.random() < rate else "good"

    try:
        found = searching.confirmed_search(names, searching.BuildTester(read), confirm, str)
    except searching.BisectError:
        return False, runs[0]
    right = (found.result.last_good, found.result.first_bad) == (names[boundary - 1], names[boundary])
    return right, runs[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--builds", type=int, default=30)
    parser.add_argument("--rates", default="0.33,0.5,1")
    parser.add_argument("--confirm", default="2", help="comma-separated --confirm values")
    args = parser.parse_args()
    for confirm in (int(c) for c in args.confirm.split(",")):
        for rate in (float(r) for r in args.rates.split(",")):
            done = [trial(seed, rate, args.builds, confirm) for seed in range(args.trials)]
            right = sum(ok for ok, _ in done)
            print(
                json.dumps(
                    {
                        "rate": rate,
                        "confirm": confirm,
                        "trials": args.trials,
                        "right": right,
                        "share": round(right / args.trials, 3),
                        "mean_runs": round(statistics.mean(runs for _, runs in done), 1),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
