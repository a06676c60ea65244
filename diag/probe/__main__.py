"""Probe entry point, run inside the target torch environment.

    python -m diag.probe diagnose --spec spec.json --out results.jsonl --artifacts DIR [--after TIME_RESULTS]
    python -m diag.probe time     --spec spec.json --out results.jsonl
    python -m diag.probe check    --out checks.jsonl [--device cuda:0 ...] [CASE_FILE ...]
    python -m diag.probe run      --spec spec.json --dir RUN_DIR --timeout S [--no-timing]
    python -m diag.probe race     --spec a.json --spec b.json [...] --out race.jsonl
    python -m diag.probe serve    [--backend inductor ...] [--for RUNS_FOLDER]

``run`` is what the orchestrator starts: both passes forked from one import (supervise.py).
``serve`` is a long-lived parent that forks each ``run`` from one import per environment (parent.py).

Everything it finds goes to a results file in the record format of records.py;
stdout is left to torch. The exit status is 0 whenever the results file holds a
``result`` or ``timing`` record; the orchestrator reads signals and timeouts itself.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from diag.probe import records
from diag.probe.passes import PASSES, add_pass_arguments


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m diag.probe")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in PASSES:
        add_pass_arguments(sub.add_parser(name))
    run = sub.add_parser("run", help="the timing pass, then the diagnosis pass, forked from one import")
    run.add_argument("--spec", required=True)
    run.add_argument("--dir", required=True)
    run.add_argument("--timeout", type=float, required=True, help="seconds each pass may take")
    run.add_argument("--no-timing", action="store_true")
    serve = sub.add_parser("serve", help="a long-lived parent that imports once and forks each run (parent.py)")
    serve.add_argument("--backend", action="append", default=[], help="a backend whose compiler to import too")
    serve.add_argument("--for", dest="serves", default="", help="what it serves (the run folder), for ps to show")
    race = sub.add_parser("race", help="compiled variants of one config timed side by side (diag race)")
    race.add_argument("--spec", action="append", required=True, help="one per variant, the same config in each")
    race.add_argument("--out", required=True)
    sub.add_parser(
        "architectures",
        help="print, as JSON, the decoder-only causal-LM model types of the installed "
        "transformers (the cases hf:all expands to)",
    )
    check = sub.add_parser("check", help="before a run: a case_check record per case file, a device_check per device")
    check.add_argument("--out", required=True)
    check.add_argument("--device", action="append", default=[])
    check.add_argument("files", nargs="*")
    return parser.parse_args(argv)


def _device_error(device: str) -> str | None:
    """Why this torch cannot run on ``device`` (cpu, cuda, cuda:N), or None."""
    if not device.startswith("cuda"):
        return None
    import torch

    if not torch.cuda.is_available():
        return f"--device {device}: torch {torch.__version__} in {sys.executable} sees no CUDA device"
    index = int(device.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        return f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) visible"
    return None


def _check(files: list[str], devices: list[str], out: str) -> int:
    from diag.probe.cases import CaseError, load_case_file

    with records.Writer(out) as writer:
        for device in devices:
            error = _device_error(device)
            writer.write(records.DEVICE_CHECK, device=device, ok=error is None, error=error)
        for file in files:
            try:
                writer.write(records.CASE_CHECK, file=file, ok=True, name=load_case_file(file).name)
            except CaseError as exc:
                writer.write(records.CASE_CHECK, file=file, ok=False, error=str(exc))
    return 0


def _race(spec_paths: list[str], out: str) -> int:
    from diag.probe import race
    from diag.probe.session import build
    from diag.probe.spec import Spec
    from diag.probe.supervise import watch_lifeline

    watch_lifeline()  # an orchestrator killed outright takes the race with it
    with records.Writer(out) as writer:
        writer.write(records.BUILD, **build())
        race.run([Spec.load(path) for path in spec_paths], writer)
    return 0


def main(argv: list[str]) -> int:
    args = _parse(argv)
    if args.command == "check":
        return _check(args.files, args.device, args.out)
    if args.command == "architectures":
        import json

        from diag.probe import hf

        print(json.dumps(hf.architectures()))
        return 0
    if args.command == "race":
        return _race(args.spec, args.out)
    if args.command == "serve":
        from diag.probe import parent

        return parent.serve(args.backend)
    if args.command == "run":
        import os

        from diag.probe import supervise

        code = supervise.main(args.spec, Path(args.dir), args.timeout, timing=not args.no_timing)
        # This process imported torch and forked the passes; it compiled nothing and started no
        # worker, and its records are written and synced. Tearing down the interpreter (torch's
        # and transformers' modules) would cost every run about half a second: skip it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    from diag.probe import passes

    return passes.run(args)


if __name__ == "__main__":
    # Run by path (python .../diag/probe/__main__.py), the probe's own directory
    # would shadow stdlib names; keep only what -m put there.
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        sys.path.pop(0)
    sys.exit(main(sys.argv[1:]))
