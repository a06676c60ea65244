"""`diag report` on a year of nightlies (50,000 synthetic runs): what a render costs.

Three renders into one folder, as a nightly publish job makes them: from scratch (an empty folder),
one night later (96 new runs, the pages made before kept), and again with no new data. For each:
wall seconds, CPU seconds of the whole process tree (user + system), peak resident memory of the
tree, and how many files were written. ``--busy N`` starts N processes that spin on the CPU for the
whole measurement (a shared CI runner); ``--repeats`` runs the three renders that many times in
fresh folders and prints the median with the range.

    python bench/report_scale.py                 # idle machine
    python bench/report_scale.py --busy 2        # both cores of a 2-core machine held by others
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import synthetic  # noqa: E402 (after sys.path names bench/)
from common import tree_usage  # noqa: E402 (after sys.path names bench/)

from diag import store  # noqa: E402 (after sys.path names the repository)

KINDS = ("from scratch", "one night later", "no new data")


def _render(db_path: Path, out: Path) -> dict:
    command = [sys.executable, "-m", "diag", "report", "--db", str(db_path), "--out", str(out), "--json"]
    done = tree_usage(command)
    printed = json.loads(done.pop("stdout"))
    return {**done, "written": printed["written"], "files": printed["files"]}


def renders(db_path: Path, out: Path, total: int) -> dict[str, dict]:
    """The three renders of the history in ``db_path`` (``total`` runs); the night is added to it."""
    found = {KINDS[0]: _render(db_path, out)}
    night = len(synthetic.configs())
    made = max(1, total // night) * night  # records() makes whole nights
    db = store.open_db(db_path)
    store.save_runs(db, itertools.islice(synthetic.records(made + night), made, None))
    db.conn.execute("PRAGMA wal_checkpoint(FULL)")
    db.conn.close()
    found[KINDS[1]] = _render(db_path, out)
    found[KINDS[2]] = _render(db_path, out)
    return found


def table_rows(found: dict[str, dict]) -> list[str]:
    """Markdown table rows (| measure | value |) for one set of renders."""
    return [
        f"| `diag report`, {kind} | {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} CPU-s (process tree), "
        f"{r['peak_mb']:.0f} MB peak; {r['written']:,} of {r['files']:,} files written |"
        for kind, r in found.items()
    ]


def _spread(values: list[float], unit: str, digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f} {unit} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=50_000)
    parser.add_argument("--busy", type=int, default=0, help="processes spinning on the CPU meanwhile")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)
    ]  # fmt: skip
    try:
        with tempfile.TemporaryDirectory(prefix="diag-report-scale-") as tmp:
            work = Path(tmp)
            seed = work / "history.db"
            db = store.open_db(seed)
            store.save_runs(db, synthetic.records(args.runs))
            db.conn.execute("PRAGMA wal_checkpoint(FULL)")
            db.conn.close()
            trials = []
            for trial in range(args.repeats):
                copy = work / f"trial{trial}.db"
                copy.write_bytes(seed.read_bytes())
                trials.append(renders(copy, work / f"site{trial}", args.runs))
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    print(f"{args.runs:,} synthetic runs, {args.busy} busy processes, {args.repeats} trials: median (range)")
    print("| render | wall | CPU, process tree | peak memory | files written |")
    print("|---|---|---|---|---|")
    for kind in KINDS:
        each = [t[kind] for t in trials]
        print(
            f"| {kind} | {_spread([e['wall_s'] for e in each], 's')} | {_spread([e['cpu_s'] for e in each], 's')} | "
            f"{_spread([e['peak_mb'] for e in each], 'MB', 0)} | {each[0]['written']:,} of {each[0]['files']:,} |"
        )


if __name__ == "__main__":
    main()
