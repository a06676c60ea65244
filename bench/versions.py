"""The version coverage run: every torch minor from 2.0 to today, provisioned through diag, all cases.

    python bench/versions.py --work DIR [--only 2.0.1,2.4.1] [--case all] [--keep-envs]

For each build in BUILDS (newest patch of each minor, with the Python it needs), this
provisions the environment with ``diag env add``, runs the four built-in cases with
fullgraph on and off (eager backend, a short decode, one timing repeat), and removes
the environment again unless --keep-envs (each one is 3-5 GB). Everything lands in
DIR: one DB per build (``<spec>.db`` and its run directories) and ``coverage.json``,
which README's coverage table and tests/fixtures/versions (``python
tests/fixtures/versions.py --from DIR``) are made from. A build that fails to
install is recorded with its one-line error and the run goes on.

Builds newer than the machine's pip cap are installed with the cap lifted for the
install only (PIP_CONSTRAINT=/dev/null).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# (torch spec, python): the newest patch of each minor; torch 2.0 has no torch.compile on Python 3.11.
BUILDS = [
    ("2.0.1", "3.10"),
    ("2.1.2", "3.11"),
    ("2.2.2", "3.11"),
    ("2.3.1", "3.11"),
    ("2.4.1", "3.11"),
    ("2.5.1", "3.11"),
    ("2.6.0", "3.11"),
    ("2.7.1", "3.11"),
    ("2.8.0", "3.11"),
    ("2.9.1", "3.11"),
    ("2.10.0", "3.11"),
    ("2.11.0", "3.11"),
    ("2.12.1", "3.11"),
    ("2.13.0", "3.11"),
    ("2.14.1", "3.11"),
    ("2.15.0", "3.11"),
]
RUN_OPTIONS = [
    "--backend",
    "eager",
    "--new-tokens",
    "4",
    "--prompt-length",
    "8",
    "--repeats",
    "1",
    "--timing-seconds",
    "0",
]


def diag(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diag", *args], capture_output=True, text=True, env=env)


def one_build(
    spec: str, python: str, work: Path, keep: bool, env: dict[str, str], cases: tuple[str, ...] = ("all",)
) -> dict:
    entry: dict = {"spec": spec, "python": python}
    started = time.monotonic()
    added = diag("env", "add", spec, "--python", python, "--json", env=env)
    entry["provision_s"] = round(time.monotonic() - started, 1)
    if added.returncode != 0:
        entry["error"] = (added.stderr.strip().splitlines() or ["no output"])[-1]
        return entry
    entry["env"] = json.loads(added.stdout)
    db = work / f"{spec}.db"
    entry["db"] = db.name
    entry["runs"] = []
    for fullgraph in ("--fullgraph", "--no-fullgraph"):
        started = time.monotonic()
        case_options = [option for case in cases for option in ("--case", case)]
        done = diag(
            "run",
            *case_options,
            *RUN_OPTIONS,
            fullgraph,
            "--torch",
            spec,
            "--python",
            python,
            "--db",
            str(db),
            "--json",
            env=env,
        )
        entry.setdefault("run_s", []).append(round(time.monotonic() - started, 1))
        if done.returncode != 0:
            entry.setdefault("run_errors", []).append((done.stderr.strip().splitlines() or ["no output"])[-1])
        try:
            entry["runs"] += json.loads(done.stdout or "[]")
        except json.JSONDecodeError:
            entry.setdefault("run_errors", []).append("unreadable --json output")
    if not keep:
        name = Path(entry["env"]["path"]).name
        diag("env", "rm", name, env=env)
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True, type=Path)
    parser.add_argument("--only", default=None, help="Comma-separated specs from BUILDS.")
    parser.add_argument("--keep-envs", action="store_true")
    parser.add_argument("--newest-first", action="store_true")
    parser.add_argument(
        "--case",
        dest="cases",
        action="append",
        default=None,
        help="Case to run (diag run --case); repeatable. Default: all built-in cases.",
    )
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PIP_CONSTRAINT="/dev/null", PIP_NO_CACHE_DIR="1")
    chosen = [b for b in BUILDS if args.only is None or b[0] in args.only.split(",")]
    if args.newest_first:
        chosen.reverse()
    report_path = args.work / "coverage.json"
    results = json.loads(report_path.read_text()) if report_path.exists() else {}
    for spec, python in chosen:
        print(f"{spec} (Python {python}) ...", file=sys.stderr, flush=True)
        results[spec] = one_build(spec, python, args.work, args.keep_envs, env, tuple(args.cases or ["all"]))
        report_path.write_text(json.dumps(results, indent=2), encoding="utf-8")
        statuses = [f"{r.get('case')}:{r.get('status')}" for r in results[spec].get("runs", [])]
        print(f"  {results[spec].get('error') or ' '.join(statuses)}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
