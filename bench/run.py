"""diag's own benchmarks. Results go to docs/BENCHMARKS.md.

    python bench/run.py            # full: 50,000 synthetic runs
    python bench/run.py --quick    # a smoke run (CI checks that it still works)

Measured here: storage ingest and `diag report` time, peak memory and largest
page on a DB of synthetic history.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from diag import store  # noqa: E402
import synthetic  # noqa: E402


def ingest(db_path: Path, total: int) -> float:
    db = store.open_db(db_path)
    start = time.perf_counter()
    store.save_runs(db, synthetic.records(total))
    return time.perf_counter() - start


def report(db_path: Path, out: Path) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "diag", "report", "--db", str(db_path), "--out", str(out)],
                   check=True, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    files = [p for p in out.rglob("*") if p.is_file()]
    largest = max(files, key=lambda p: p.stat().st_size)
    return {"seconds": elapsed, "peak_rss_mb": max(peak_kib, before) / 1024, "files": len(files),
            "largest_page": str(largest.relative_to(out)), "largest_page_kb": largest.stat().st_size / 1024,
            "total_mb": sum(p.stat().st_size for p in files) / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="1,000 runs instead of 50,000")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--write", action="store_true", help="append the table to docs/BENCHMARKS.md")
    args = parser.parse_args()
    total = args.runs or (1000 if args.quick else 50_000)
    with tempfile.TemporaryDirectory() as tmp:
        db_path = Path(tmp) / "scale.db"
        ingest_s = ingest(db_path, total)
        db_mb = sum(p.stat().st_size for p in db_path.parent.glob("scale.db*")) / 2**20
        result = report(db_path, Path(tmp) / "site")
    rows = [
        ("runs ingested", f"{total:,}"),
        ("ingest time (one transaction)", f"{ingest_s:.1f} s"),
        ("DB size", f"{db_mb:.1f} MB"),
        ("`diag report` wall time", f"{result['seconds']:.1f} s"),
        ("`diag report` peak RSS", f"{result['peak_rss_mb']:.0f} MB"),
        ("files written", f"{result['files']:,} ({result['total_mb']:.0f} MB)"),
        ("largest file", f"{result['largest_page']} ({result['largest_page_kb']:.0f} KB)"),
    ]
    import torch

    header = (f"## Report at scale — {dt.date.today()}\n\n{platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}\n\n"
              "| measure | value |\n|---|---|\n")
    table = header + "\n".join(f"| {k} | {v} |" for k, v in rows) + "\n"
    print(table)
    if args.write:
        target = REPO / "docs" / "BENCHMARKS.md"
        existing = target.read_text() if target.exists() else "# Benchmarks\n\nWritten by `python bench/run.py --write`.\n\n"
        target.write_text(existing + "\n" + table)


if __name__ == "__main__":
    main()
