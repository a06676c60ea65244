"""One pass of a run, in its own process: ``time`` (timing.py), ``diagnose`` (diagnose.py) or
``count`` (instructions.py).

``supervise`` forks each pass from the process that imported torch and calls ``main`` in the
child; where there is no fork, it starts ``python -m diag.probe PASS ...``, which lands here too.

Imports: standard library at import time; torch through the pass it runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from diag.probe import records

PASSES = ("diagnose", "time", "count")


def add_pass_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spec", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--artifacts", default=".")
    parser.add_argument(
        "--after",
        default=None,
        help="diagnose: the results file of the timing pass that ran before it, on the same inductor cache",
    )
    parser.add_argument("--method", choices=("perf", "callgrind"), default="perf", help="count: how to count")


def main(argv: list[str]) -> int:
    """``argv``: a pass's name and its arguments, as ``python -m diag.probe`` takes them."""
    parser = argparse.ArgumentParser(prog="python -m diag.probe")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in PASSES:
        add_pass_arguments(sub.add_parser(name))
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    from diag.probe import diagnose, instructions, timing
    from diag.probe.cases import load_case_file
    from diag.probe.session import Workload, build, exception_info
    from diag.probe.spec import Spec
    from diag.probe.statuses import EAGER_ERROR

    spec = Spec.load(args.spec)
    results = records.Writer(args.out)
    artifacts = Path(args.artifacts)
    artifacts.mkdir(parents=True, exist_ok=True)
    try:
        results.write(records.BUILD, **build())
        try:
            workload = Workload(spec, load_case_file(spec.case_path))
        except Exception as exc:
            results.write(records.RESULT, status=EAGER_ERROR, **exception_info(exc))
            return 0
        if args.command == "diagnose":
            diagnose.run(workload, results, artifacts, Path(args.after) if args.after else None)
        elif args.command == "count":
            instructions.run(workload, results, args.method)
        else:
            timing.run(workload, results, Path(args.out).parent)
    finally:
        results.close()
    return 0
