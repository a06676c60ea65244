"""How well candidate host references follow this host's changes of speed.

    python bench/host_trace.py [SECONDS] [--out trace.json]

For SECONDS (default 180) it alternates one eager generation of append_last (8 tokens,
one thread) with each candidate reference, and prints, per candidate, the correlation
of its time with the generation's median decode step and how much dividing by it
steadies the step (coefficient of variation before and after). The pure-Python loop
is the one the timing pass uses (diag/probe/timing.py); the others are memory-bound
alternatives that were considered.
"""

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from diag.probe.cases import load_case_file  # noqa: E402 (after sys.path names the repository)
from diag.probe.session import Workload  # noqa: E402 (after sys.path names the repository)
from diag.probe.spec import Config, Spec  # noqa: E402 (after sys.path names the repository)
from diag.probe.timing import host_reference  # noqa: E402 (after sys.path names the repository)


def candidates() -> dict:
    rng = random.Random(0)
    table = list(range(1 << 20))
    picks = [rng.randrange(len(table)) for _ in range(20000)]
    words = {i: str(i) for i in range(50000)}
    keys = list(words)[::5]
    block = bytearray(4 << 20)

    def random_reads():
        total = 0
        for i in picks:
            total += table[i]

    def dict_lookups():
        total = 0
        for key in keys:
            total += len(words[key])

    def copies():
        for _ in range(4):
            bytes(block)

    return {
        "python_loop (timing pass)": host_reference,
        "random_reads_8MB": random_reads,
        "dict_lookups": dict_lookups,
        "memcpy_4MB": copies,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("seconds", nargs="?", type=float, default=180.0)
    parser.add_argument("--out", default=None, help="write the raw trace here as JSON")
    args = parser.parse_args()
    torch.set_num_threads(1)
    case = load_case_file(str(REPO / "diag" / "cases" / "append_last.py"))
    workload = Workload(Spec("append_last", case.path, Config(backend="eager", new_tokens=8, threads=1)), case)
    refs = candidates()

    def timed(fn) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    for _ in range(5):
        workload.eager()
        for fn in refs.values():
            fn()
    rows = []
    end = time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        step = statistics.median(workload.eager().step_seconds)
        rows.append([step] + [timed(fn) for fn in refs.values()])
    if args.out:
        Path(args.out).write_text(json.dumps({"columns": ["step", *refs], "rows": rows}))
    steps = [r[0] for r in rows]

    def cv(values):
        return statistics.pstdev(values) / statistics.mean(values)

    print(
        f"{len(rows)} generations over {args.seconds:.0f} s; median decode step "
        f"{statistics.median(steps) * 1e3:.3f} ms, CV {cv(steps):.1%}"
    )
    print("| reference | median | correlation with the step | CV of step / reference |")
    print("|---|---|---|---|")
    for column, name in enumerate(refs, 1):
        ref = [r[column] for r in rows]
        ratio = [s / h for s, h in zip(steps, ref)]
        print(
            f"| {name} | {statistics.median(ref) * 1e3:.2f} ms | {statistics.correlation(steps, ref):.2f} "
            f"| {cv(ratio):.1%} |"
        )


if __name__ == "__main__":
    main()
