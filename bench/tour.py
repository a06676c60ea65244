"""README's tour, recorded: its commands run for real and what they printed, for README to show.

    python bench/tour.py record      # runs the tour in a fresh folder (about a minute on 2 cores)

writes docs/tour.json: each command, what it printed (the progress lines on stderr and the lines on
stdout, in the order a terminal shows them), how long it took, and the torch it ran on. README's
console blocks are made from that file by cog (``block()``; `cog -r README.md`), and
tests/test_docs.py fails where README and the file disagree: the tour shows what diag printed,
never what someone typed. tests/test_readme.py runs the same commands again and finds each shown
run, case, config and status in what they print.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RECORD = REPO / "docs" / "tour.json"
TOUR = (
    ["run", "--case", "append_last", "--case", "dynamic_slice", "--backend", "eager", "--new-tokens", "6"],
    ["show", "3"],
    ["report", "--out", "site"],
)
SHOWN_LINES = {"show": 4}  # of show's long record, the heading README prints (then "...")


def _shown(argv: list[str], printed: str, folder: Path) -> str:
    """What README shows of a command's output: the folder it ran in and the interpreter's paths
    shortened (``.../diag/cases/x.py``), and show's heading alone."""
    text = printed.replace(str(folder) + os.sep, "").replace(str(folder), ".")
    text = re.sub(r"(?:/[^\s/:]+)+/(diag/cases/[\w.]+)", r".../\1", text)
    lines = text.rstrip("\n").splitlines()
    keep = SHOWN_LINES.get(argv[0])
    if keep is not None and len(lines) > keep:
        lines = [*lines[:keep], "..."]
    return "\n".join(lines)


def record() -> dict:
    steps = []
    with tempfile.TemporaryDirectory(prefix="diag-tour-") as work:
        folder = Path(work).resolve()
        for argv in TOUR:
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "diag", *argv],
                cwd=folder,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,  # progress and lines, in the order a terminal shows them
                text=True,
            )
            if done.returncode != 0:
                raise SystemExit(f"diag {' '.join(argv)} exited {done.returncode}:\n{done.stdout}")
            steps.append(
                {
                    "argv": argv,
                    "printed": _shown(argv, done.stdout, folder),
                    "seconds": round(time.perf_counter() - started, 1),
                }
            )
    import torch

    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "recorded": time.strftime("%Y-%m-%d"),
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "load_1m": round(os.getloadavg()[0], 1) if hasattr(os, "getloadavg") else None,
        "steps": steps,
    }


def block(index: int) -> str:
    """README's console block for the tour's ``index``-th command, from docs/tour.json."""
    step = json.loads(RECORD.read_text(encoding="utf-8"))["steps"][index]
    return f"```console\n$ diag {' '.join(step['argv'])}\n{step['printed']}\n```\n"


def recorded() -> str:
    """Where and how long README's tour took when it was recorded."""
    found = json.loads(RECORD.read_text(encoding="utf-8"))
    took = found["steps"][0]["seconds"]
    return (
        f"Recorded {found['recorded']} by `python bench/tour.py record` with torch {found['torch']} (Python "
        f"{found['python']}) on {found['cpus']} CPUs at load {found['load_1m']}: the run took {took:.0f} s.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["record"])
    parser.parse_args()
    found = record()
    RECORD.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    total = sum(step["seconds"] for step in found["steps"])
    print(f"wrote {RECORD.relative_to(REPO)}: {len(found['steps'])} commands, {total:.0f} s, load {found['load_1m']}")


if __name__ == "__main__":
    main()
