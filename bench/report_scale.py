"""`diag report` on a year of nightlies (50,000 synthetic runs): what a render costs.

Three renders into one folder, as a nightly publish job makes them: from scratch (an empty folder),
one night later (96 new runs, the pages made before kept), and again with no new data. For each:
wall seconds, CPU seconds of the whole process tree (user + system, and the system part alone),
the peak memory of the tree (the proportional set sizes of its processes summed: a page a forked
child shares with its parent counted once) with the largest resident set of one process, and how
many files were written. Dirty pages of the step before are written out before each render, and
each checkout's bytecode is written before the first, as an installed diag has it.

``--busy N`` starts N processes that spin on the CPU for the whole measurement (a shared CI
runner); ``--repeats`` runs the three renders that many times in fresh folders and prints the
median with the range; each trial renders with ``--processes 2`` and with ``--processes 1`` in
turn, so that the two are compared under the same load, and with ``--against DIR`` also with the
diag checked out in DIR (another commit), from the same history; each trial starts with the next
of them.

    python bench/report_scale.py                 # idle machine
    python bench/report_scale.py --busy 2        # both cores of a 2-core machine held by others
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import synthetic  # after sys.path names bench/
from common import REPO, compiled, tree_usage  # after sys.path names bench/

KINDS = ("from scratch", "one night later", "no new data")


def _render(db_path: Path, out: Path, processes: Optional[int], code: Optional[Path] = None) -> dict:
    """``code``: a checkout of diag to render with instead (``python -m diag`` run there imports it)."""
    command = [sys.executable, "-m", "diag", "report", "--db", str(db_path.resolve()), "--out", str(out.resolve())]
    command += ["--json"] + (["--processes", str(processes)] if processes else [])
    # what the step before left to write (the DB copied, the night stored) is written out first: on
    # a disk mounted with discard, creating files while 60 MB are written back costs the render
    # seconds of system time that are not its own
    os.sync()
    done = tree_usage(command, cwd=code)
    printed = json.loads(done.pop("stdout"))
    return {**done, "written": printed["written"], "files": printed["files"]}


def _synthetic(code: Optional[Path], call: str, path: Path, runs: int) -> None:
    """``synthetic.<call>(path, runs)`` with this checkout's diag, or with the one in ``code``: the
    DB is then of the schema that diag knows."""
    if code is None:
        getattr(synthetic, call)(path, runs)
        return
    script = (
        f"import sys; from pathlib import Path; sys.path[:0] = [{str(code)!r}, {str(code / 'bench')!r}]; "
        f"import synthetic; synthetic.{call}(Path(sys.argv[1]), int(sys.argv[2]))"
    )
    subprocess.run([sys.executable, "-c", script, str(path), str(runs)], check=True, cwd=code)


def renders(
    db_path: Path, out: Path, total: int, processes: Optional[int] = None, code: Optional[Path] = None
) -> dict[str, dict]:
    """The three renders of the history in ``db_path`` (``total`` runs); the night is added to it.
    ``processes``: ``diag report --processes`` (None: its default); ``code``: see ``_render``."""
    found = {KINDS[0]: _render(db_path, out, processes, code)}
    _synthetic(code, "add_nightly", db_path, synthetic.whole_nightlies(total))
    found[KINDS[1]] = _render(db_path, out, processes, code)
    found[KINDS[2]] = _render(db_path, out, processes, code)
    return found


def table_rows(found: dict[str, dict]) -> list[str]:
    """Markdown table rows (| measure | value |) for one set of renders."""
    return [
        f"| `diag report`, {kind} | {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} CPU-s (process tree), "
        f"{r['peak_mb']:.0f} MB peak (the tree's proportional set sizes); {r['written']:,} of {r['files']:,} "
        "files written |"
        for kind, r in found.items()
    ]


def _spread(values: list[float], unit: str, digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f} {unit} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=50_000)
    parser.add_argument("--busy", type=int, default=0, help="processes spinning on the CPU meanwhile")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--processes",
        type=int,
        choices=(1, 2),
        action="append",
        help="diag report --processes; repeat to compare (each trial alternates them). Default: 2 and 1",
    )
    parser.add_argument(
        "--against",
        type=Path,
        help="a checkout of diag at another commit (git worktree add DIR REV): its renders alternate with these",
    )
    args = parser.parse_args()
    variants: list[Any] = list(args.processes or [2, 1]) + ([args.against.resolve()] if args.against else [])
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)
    ]  # fmt: skip
    trials: dict[Any, list[dict[str, dict]]] = {variant: [] for variant in variants}
    try:
        with tempfile.TemporaryDirectory(prefix="diag-report-scale-") as tmp:
            work = Path(tmp)
            seeds = {}  # per diag checkout (None: this one), the history written by that diag
            for index, code in enumerate(sorted({v for v in variants if isinstance(v, Path)}) + [None]):
                compiled(code or REPO)
                seeds[code] = work / f"history{index}.db"
                _synthetic(code, "write_history", seeds[code], args.runs)
            for trial in range(args.repeats):
                # each trial starts with another variant: the first render after the history is
                # copied meets whatever the disk still has to write, and none should meet it always
                turn = trial % len(variants)
                for index, variant in enumerate(variants[turn:] + variants[:turn]):
                    copy = work / f"trial{trial}-{index}.db"
                    code = variant if isinstance(variant, Path) else None
                    copy.write_bytes(seeds[code].read_bytes())
                    processes = None if code else variant
                    trials[variant].append(renders(copy, work / f"site{trial}-{index}", args.runs, processes, code))
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    print(f"{args.runs:,} synthetic runs, {args.busy} busy processes, {args.repeats} trials: median (range)")
    print(
        "| render | diag | wall | CPU, process tree | of it, system | peak memory of the tree (PSS) "
        "| largest process (RSS) | files written |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for kind in KINDS:
        for variant in variants:
            each = [t[kind] for t in trials[variant]]
            label = f"`{variant.name}`" if isinstance(variant, Path) else f"`--processes {variant}`"
            print(
                f"| {kind} | {label} | {_spread([e['wall_s'] for e in each], 's')} | "
                f"{_spread([e['cpu_s'] for e in each], 's')} | {_spread([e['system_s'] for e in each], 's')} | "
                f"{_spread([e['peak_mb'] for e in each], 'MB', 0)} | "
                f"{_spread([e['largest_rss_mb'] for e in each], 'MB', 0)} | "
                f"{each[0]['written']:,} of {each[0]['files']:,} |"
            )


if __name__ == "__main__":
    main()
