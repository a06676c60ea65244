"""Runs per core-hour with one import per environment (a long-lived probe parent) against a process
per run (DIAG_PROBE_PARENT=0), side by side on one machine (docs/BENCHMARKS.md, "Probe parents").

    python bench/parents.py                       # hf:all, fullgraph on and off: 2 x 372 runs, about 80 min
    python bench/parents.py --case hf:llama --case hf:gpt2      # a quick look
    python bench/parents.py --case all --torch 2.0.1 --python 3.10   # the built-in cases on another torch
    python bench/parents.py --baseline 5f4e122^   # against the code of an earlier commit, a process per run
    python bench/parents.py --baseline 5f4e122^ --every 3   # every third architecture of hf:all, by name

Each side is one `diag run --backend eager --no-timing --new-tokens 4 --jobs 2` into a DB of its
own; its CPU is the user and system time of diag and every process under it (getrusage of the
reaped children), its memory the peak of the summed PSS of the process tree, sampled each second
(PSS shares a page between the processes that map it, so forked children are not counted twice).
The two DBs are then compared row by row: status, error type, counts, the keys of every finding
and the frames torch compiled must be equal. With --baseline COMMIT the first side runs the diag of
that commit (checked out into the work folder, run from there), so what changed since it is measured
too; rows its fixes changed are listed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

from common import REPO, environ

RUN = ["run", "--backend", "eager", "--no-timing", "--new-tokens", "4", "--jobs", "2"]


def _tree_pss_kb(root: int) -> int:
    """The summed PSS of ``root`` and its descendants (kB), from /proc."""
    sys.path.insert(0, str(REPO))
    from diag.probe.supervise import _children_of

    tree = {root} | _children_of({root})
    total = 0
    for pid in tree:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return total


def checkout(commit: str, work: Path) -> Path:
    """The tree of ``commit`` in ``work``/baseline, to run its diag from (`python -m diag` there)."""
    tree = work / "baseline"
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def side(cases: list[str], db: Path, parent: bool, torch: list[str], code: Optional[Path] = None) -> dict:
    """One `diag run` of ``cases``: wall and CPU seconds, runs, peak PSS of its tree. ``code``: a tree
    whose diag runs instead of this one."""
    env = environ(**({} if parent else {"DIAG_PROBE_PARENT": "0"}))
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(code), env.get("PYTHONPATH")]))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "diag", *RUN, *torch, *[a for c in cases for a in ("--case", c)], "--db", str(db)],
        env=env,
        cwd=code or db.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(1.0):
            peak[0] = max(peak[0], _tree_pss_kb(process.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = process.communicate()
    done.set()
    sampler.join()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if process.returncode not in (0, 1):
        raise SystemExit(f"diag run failed ({process.returncode}): {err[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    try:
        runs = sqlite3.connect(db).execute("SELECT count(*) FROM runs").fetchone()[0]
    except sqlite3.OperationalError:
        runs = 0
    if not runs:
        raise SystemExit(f"diag run recorded no run: {err.strip()[-2000:]}")
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "runs": runs,
        "runs_per_core_hour": runs * 3600 / cpu,
        "peak_pss_mb": peak[0] / 1024,
    }


def findings(db: Path) -> dict[str, tuple]:
    """What each row found, keyed by its label."""
    sys.path.insert(0, str(REPO))
    from diag import store
    from diag.row import label, of

    handle = store.open_db(db)
    found = {}
    for run in handle.query("SELECT * FROM runs"):
        full = store.get_run(handle, run["id"])
        keys = tuple(sorted(item["key"] for t in ("graph_breaks", "recompiles", "hidden_errors") for item in full[t]))
        frames = tuple(sorted((f["compile_id"], f["co_name"], f["fail_type"] or "") for f in full["frames"]))
        counts = (run["graph_break_count"], run["recompile_count"], run["hidden_error_count"], run["tokens_equal"])
        found[label(of(run))] = (run["status"], run["error_type"], counts, keys, frames)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", action="append", default=[], help="default: hf:all")
    parser.add_argument("--torch", help="the torch to run on (diag run --torch; default: this one)")
    parser.add_argument("--python", help="its interpreter (diag run --python)")
    parser.add_argument(
        "--baseline", metavar="COMMIT", help="the first side runs this commit's diag, a process per run (default: this)"
    )
    parser.add_argument(
        "--every", type=int, metavar="N", help="every Nth architecture of hf:all (this transformers'), sorted by name"
    )
    parser.add_argument("--work", type=Path, help="where the two DBs go (default: a temporary folder)")
    parser.add_argument("--keep-runs", action="store_true", help="keep the run directories (hf:all: GBs of logs)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cases = args.case or ["hf:all"]
    if args.every:
        sys.path.insert(0, str(REPO))
        from diag.probe import hf

        cases = [f"hf:{name}" for name in sorted(hf.architectures())[:: args.every]]
    torch = (["--torch", args.torch] if args.torch else []) + (["--python", args.python] if args.python else [])
    work = args.work or Path(tempfile.mkdtemp(prefix="diag-bench-parents-"))
    work.mkdir(parents=True, exist_ok=True)
    # a warm-up, so that neither side reads torch and transformers from a cold disk
    subprocess.run(
        [sys.executable, "-m", "diag", *RUN, *torch, "--case", "append_last", "--db", str(work / "warm.db")],
        env=environ(),
        cwd=work,
        capture_output=True,
        check=False,
    )
    result = {"cases": cases, "torch": args.torch or "current", "loadavg_before": os.getloadavg()[0]}
    baseline = checkout(args.baseline, work) if args.baseline else None
    result["baseline"] = args.baseline or "this code, DIAG_PROBE_PARENT=0"
    result["alone"] = side(cases, work / "alone.db", parent=False, torch=torch, code=baseline)
    result["forked"] = side(cases, work / "forked.db", parent=True, torch=torch)
    result["loadavg_after"] = os.getloadavg()[0]
    alone, forked = findings(work / "alone.db"), findings(work / "forked.db")
    differ = sorted(row for row in set(alone) | set(forked) if alone.get(row) != forked.get(row))
    if not args.keep_runs:  # the DBs hold what was compared; the runs' logs and traces would fill a disk
        for runs in work.glob("*.runs"):
            shutil.rmtree(runs, ignore_errors=True)
    result["rows"], result["rows_differing"] = len(alone), differ
    result["ratio_runs_per_core_hour"] = result["forked"]["runs_per_core_hour"] / result["alone"]["runs_per_core_hour"]
    result["ratio_wall"] = result["alone"]["wall_s"] / result["forked"]["wall_s"]
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"alone: {result['baseline']}")
    for name in ("alone", "forked"):
        s = result[name]
        print(
            f"{name:7} {s['runs']} runs, {s['wall_s']:.0f} s wall, {s['cpu_s']:.0f} CPU-s: "
            f"{s['runs_per_core_hour']:.0f} runs per core-hour, peak PSS {s['peak_pss_mb']:.0f} MB"
        )
    print(f"runs per core-hour x{result['ratio_runs_per_core_hour']:.2f}, wall x{result['ratio_wall']:.2f}")
    print(f"rows compared {result['rows']}, differing {len(differ)}" + (f": {differ[:10]}" if differ else ""))


if __name__ == "__main__":
    main()
