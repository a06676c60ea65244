"""diag's own benchmarks; the Markdown tables go to docs/benchmarks/raw-latest.md with --write.

    python bench/run.py [--write]    # everything (about an hour on 2 cores; part 4 alone 45 minutes)
    python bench/run.py --quick      # a smoke run of every part (CI checks it still works)

1. Overhead: `diag run` (both passes) against bench/bare.py doing the same compile and timing by
   hand, each starting from an empty inductor cache; and the diagnosis pass against bare.py with
   TORCH_LOGS="+dynamo,+aot,+inductor" written to a file. ``--rounds N`` alternates N pairs of
   `diag run` and the bare script per case and reports the median ratio.
2. Matrix throughput: the four cases x fullgraph on/off with --jobs 1 and --jobs 2. And (part "leg",
   not in the default set: about 20 minutes) the nightly workflow's CPU leg as it runs there.
3. Storage and report at scale: synthetic history, `diag report` wall time and peak memory.
4. Timing fidelity: A/A spread of per-token medians and false alarms of `diag check`; A/B
   detection of an injected 10% per-token slowdown; both over N repetitions, each side one
   `diag run --repeat 5 --timing-seconds 2` invocation. Preceded by the machine's own
   steadiness: the same small torch workload timed in 250 ms windows for 20 s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import report_scale  # after sys.path names bench/
import synthetic  # after sys.path names the repository
from common import (
    BENCH,
    CASES,
    LEG,
    REPO,
    _seconds,
    environ,
    graph_break_pages,
    leg_option,
    timed,
    tree_usage,
)  # after sys.path names bench/
from fidelity import fidelity, steadiness  # after sys.path names bench/

from diag import store  # after sys.path names the repository


def diag_run(*args: str) -> list[str]:
    """The command line of `diag run ARGS` in this interpreter."""
    return [sys.executable, "-m", "diag", "run", *args]


def overhead(work: Path, cases: list[str], backend: str, new_tokens: int, repeats: int, rounds: int = 1) -> list[tuple]:
    """Per case: ``rounds`` pairs of `diag run` and the bare script, alternated so that a drift of the
    machine's speed lands on both, each from an empty inductor cache; then the diagnosis pass alone and
    the bare script with TORCH_LOGS once. The row holds the medians and each round's ratio."""
    rows = []
    for case in cases:
        diag_runs, bare_runs, passes = [], [], {}
        for n in range(rounds):
            cold_diag, cold_bare = work / f"cache-diag-{case}-{n}", work / f"cache-bare-{case}-{n}"
            diag_s, _ = timed(
                diag_run("--case", case, "--fullgraph", "--backend", backend, "--new-tokens", str(new_tokens))
                + ["--repeats", str(repeats), "--db", str(work / "o.db")],
                environ(TORCHINDUCTOR_CACHE_DIR=str(cold_diag)),
                work,
            )
            bare_s, _ = timed(
                [sys.executable, str(BENCH / "bare.py"), case, backend, str(new_tokens), str(repeats)],
                environ(TORCHINDUCTOR_CACHE_DIR=str(cold_bare)),
            )
            diag_runs.append(diag_s)
            bare_runs.append(bare_s)
            run_dir = sorted((work / "o.runs").glob("*/spec.json"), key=os.path.getmtime)[-1].parent
            if (run_dir / "passes.jsonl").exists():  # diag before forked passes wrote no such file
                for line in (run_dir / "passes.jsonl").read_text().splitlines():
                    record = json.loads(line)
                    passes.setdefault(record["name"], []).append(record["duration_s"])
        spec = json.loads((run_dir / "spec.json").read_text())
        spec_path = work / f"spec-{case}.json"
        spec_path.write_text(json.dumps(spec))
        diagnose_s, _ = timed(
            [
                sys.executable,
                "-m",
                "diag.probe",
                "diagnose",
                "--spec",
                str(spec_path),
                "--out",
                str(work / f"d-{case}.jsonl"),
                "--artifacts",
                str(work / f"a-{case}"),
            ],
            environ(
                TORCHINDUCTOR_CACHE_DIR=str(work / f"cache-alone-{case}"),
                TORCH_TRACE=str(work / f"t-{case}"),
                PYTHONPATH=str(REPO),
            ),
        )
        logged_s, _ = timed(
            [sys.executable, str(BENCH / "bare.py"), case, backend, str(new_tokens), str(repeats)],
            environ(
                TORCHINDUCTOR_CACHE_DIR=str(work / f"cache-logs-{case}"),
                TORCH_LOGS="+dynamo,+aot,+inductor",
                TORCH_LOGS_OUT=str(work / f"logs-{case}.txt"),
            ),
        )
        median = statistics.median
        rows.append(
            (
                case,
                median(diag_runs),
                median(bare_runs),
                diagnose_s,
                logged_s,
                median(passes["time"]) if passes.get("time") else None,
                median(passes["diagnose"]) if passes.get("diagnose") else None,
                [d / b for d, b in zip(diag_runs, bare_runs)],
            )
        )
    return rows


def matrix(work: Path, jobs: int, cases: list[str], backend: str, new_tokens: int) -> float:
    case_args = [arg for case in cases for arg in ("--case", case)]
    seconds, _ = timed(
        [
            sys.executable,
            "-m",
            "diag",
            "run",
            *case_args,
            "--backend",
            backend,
            "--new-tokens",
            str(new_tokens),
            "--jobs",
            str(jobs),
            "--db",
            str(work / f"m{jobs}.db"),
        ],
        environ(),
        work,
    )
    return seconds


def profile_cost(work: Path, cases: list[str], repeats: int) -> list[tuple]:
    """``diag run`` with and without --profile, alternating, on the nightly leg's settings (aot_eager,
    fullgraph, 16 new tokens, 5 timed generations): wall seconds and the profiler's own share."""
    rows = []
    for case in cases:
        plain, profiled = [], []
        for index in range(repeats):
            for flag, into in (("--no-profile", plain), ("--profile", profiled)):
                seconds, _ = timed(
                    diag_run("--case", case, "--backend", "aot_eager", "--fullgraph", "--timing-seconds", "0", flag)
                    + ["--db", str(work / f"profile-{case}-{index}{flag}.db")],
                    environ(),
                    work,
                )
                into.append(seconds)
        rows.append((case, statistics.median(plain), statistics.median(profiled)))
    return rows


def nightly_leg(work: Path, quick: bool) -> dict:
    """The nightly workflow's CPU leg, its `diag run` as written there (four cases x fullgraph on and off x
    `--repeat 5`, inductor, 2 s of timing per mode): wall time, runs, statuses."""
    options = (
        ["--case", "append_last", "--backend", "eager", "--repeat", "1", "--timing-seconds", "0"] if quick else LEG
    )
    seconds, out = timed(
        [sys.executable, "-m", "diag", "run", *options, "--db", str(work / "leg.db"), "--json"], environ(), work
    )
    runs = json.loads(out)
    by_status: dict[str, int] = {}
    for run in runs:
        by_status[run["status"]] = by_status.get(run["status"], 0) + 1
    return {
        "seconds": seconds,
        "runs": len(runs),
        "statuses": by_status,
        "slowest": max((r.get("duration_s") or 0 for r in runs), default=0),
    }


def scale(work: Path, total: int) -> dict:
    db_path = work / "scale.db"
    db = store.open_db(db_path)
    start = time.perf_counter()
    store.save_runs(db, synthetic.records(total))
    ingest_s = time.perf_counter() - start
    db.conn.execute("PRAGMA wal_checkpoint(FULL)")
    out = work / "site"
    command = [sys.executable, "-m", "diag", "report", "--db", str(db_path), "--out", str(out), "--json"]
    renders = report_scale.renders(db_path, out, total)
    files = [p for p in out.rglob("*") if p.is_file()]
    largest = max(files, key=lambda p: p.stat().st_size)
    page = max((p for p in files if p.suffix == ".html"), key=lambda p: p.stat().st_size)
    start = time.perf_counter()
    latest = len(db.execute("SELECT * FROM latest_status").fetchall())
    view_s = time.perf_counter() - start
    breaks_count, breaks_cpu = graph_break_pages(db)
    exported = work / "export"
    command = [sys.executable, "-m", "diag", "export", "--db", str(db_path), "--out", str(exported), "--json"]
    done = tree_usage(command)
    export_s, export_peak, printed = done["wall_s"], done["peak_mb"], done["stdout"]
    export_rows = json.loads(printed)["rows"]
    import duckdb

    read_back = {
        table: duckdb.sql(f"SELECT count(*) FROM read_parquet('{exported}/{table}/**/*.parquet')").fetchall()[0][0]
        for table, count in export_rows.items()
        if count
    }
    return {
        "breaks_count": breaks_count,
        "breaks_cpu": breaks_cpu,
        "export_s": export_s,
        "export_peak_mb": export_peak,
        "export_rows": sum(export_rows.values()),
        "export_equal": all(read_back[table] == count for table, count in export_rows.items() if count),
        "runs": total,
        "ingest_s": ingest_s,
        "db_mb": db_path.stat().st_size / 2**20,
        "renders": renders,
        "files": len(files),
        "site_mb": sum(p.stat().st_size for p in files) / 2**20,
        "largest": f"{largest.relative_to(out)} ({largest.stat().st_size / 1024:.0f} KB)",
        "largest_page": f"{page.relative_to(out)} ({page.stat().st_size / 1024:.0f} KB)",
        "view_s": view_s,
        "view_rows": latest,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a smoke run of every part")
    parser.add_argument("--write", action="store_true", help="write the tables to docs/benchmarks/raw-latest.md")
    parser.add_argument(
        "--parts",
        default="overhead,matrix,scale,fidelity",
        help="comma-separated: overhead, matrix, scale, fidelity, profile, leg",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="overhead: diag/bare pairs per case, alternated (medians reported)"
    )
    parser.add_argument("--pairs", type=int, default=20, help="fidelity: A/A and A/B pairs (full run)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    quick = args.quick
    import torch

    lines = [
        f"## {dt.date.today()} — {'quick' if quick else 'full'} run",
        "",
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"torch {torch.__version__}, CPU",
        "",
    ]
    with tempfile.TemporaryDirectory(prefix="diag-bench-") as tmp:
        work = Path(tmp)
        if "overhead" in parts:
            backend = "eager" if quick else "inductor"
            rows = overhead(work, CASES[:1] if quick else CASES, backend, 8, 1 if quick else 5, args.rounds)
            lines += [
                f"### 1. Overhead ({backend} backend, fullgraph=True, 8 new tokens, empty inductor caches)",
                "",
                f"Medians of {args.rounds} alternated round(s) of `diag run` and the bare script.",
                "",
                "| case | diag run (both passes) | of which timing / diagnosis pass | bare script | ratio "
                "| each round's ratio | diagnosis pass alone | bare + TORCH_LOGS | ratio |",
                "|---|---|---|---|---|---|---|---|---|",
            ]
            lines += [
                f"| {c} | {d:.1f} s | {_seconds(tp)} / {_seconds(dg)} | {b:.1f} s | {statistics.median(each):.2f} "
                f"| {', '.join(f'{r:.2f}' for r in each)} | {dp:.1f} s | {lg:.1f} s | {dp / lg:.2f} |"
                for c, d, b, dp, lg, tp, dg, each in rows
            ]
            lines += [
                "",
                "The diagnosis pass alone starts from an empty inductor cache, as the bare script does; "
                "inside `diag run` it follows the timing pass and finds the compiled kernels there.",
                "",
            ]
        if "leg" in parts:
            leg = nightly_leg(work, quick)
            command = "diag run " + " ".join(LEG)
            lines += [
                f"### Nightly CPU leg (`{command}`, as .github/workflows/nightly.yml runs it)",
                "",
                "| wall time | runs | statuses | slowest run |",
                "|---|---|---|---|",
                f"| {leg['seconds'] / 60:.1f} min | {leg['runs']} | "
                + ", ".join(f"{k} {v}" for k, v in sorted(leg["statuses"].items()))
                + f" | {leg['slowest']:.1f} s |",
                "",
            ]
        if "matrix" in parts:
            cases = CASES[:1] if quick else CASES
            one, two = matrix(work, 1, cases, "eager", 8), matrix(work, 2, cases, "eager", 8)
            lines += [
                f"### 2. Matrix throughput ({len(cases)} cases x fullgraph on/off, eager backend, both passes)",
                "",
                "| --jobs 1 | --jobs 2 | speed-up |",
                "|---|---|---|",
                f"| {one:.0f} s | {two:.0f} s | {one / two:.2f} |",
                "",
            ]
        if "profile" in parts:
            rows = profile_cost(work, CASES[:1] if quick else CASES, 1 if quick else 3)
            lines += [
                "### Profiler cost (`diag run --profile`, aot_eager, fullgraph, median of runs alternating "
                "with and without)",
                "",
                "| case | without | with --profile | cost |",
                "|---|---|---|---|",
            ]
            lines += [f"| {case} | {a:.1f} s | {b:.1f} s | {100 * (b - a) / a:+.0f}% |" for case, a, b in rows]
            lines.append("")
        if "scale" in parts:
            result = scale(work, 1000 if quick else 50_000)
            lines += [
                "### 3. Storage and report at scale (synthetic history)",
                "",
                "| measure | value |",
                "|---|---|",
                f"| runs | {result['runs']:,} |",
                f"| ingest (one transaction) | {result['ingest_s']:.1f} s |",
                f"| DB size | {result['db_mb']:.1f} MB |",
                *report_scale.table_rows(result["renders"]),
                f"| Datasette `latest_status`, every row | {result['view_s']:.2f} s ({result['view_rows']:,} rows) |",
                f"| graph-break pages, {result['breaks_count']} GB ids (the history's breaks spread over them) | "
                f"{result['breaks_cpu']:.2f} CPU-s added to a render |",
                f"| `diag export` (Parquet) | {result['export_s']:.1f} s, {result['export_peak_mb']:.0f} MB peak, "
                f"{result['export_rows']:,} rows; DuckDB reads back the same counts: {result['export_equal']} |",
                "",
            ]
        if "fidelity" in parts:
            steady = steadiness(2 if quick else 20)
            lines += [
                "### 4. Timing fidelity",
                "",
                f"The machine itself: a fixed one-thread workload timed in {steady['windows']} windows of "
                f"250 ms over {steady['seconds']:.0f} s ran at {steady['min_ms']:.2f} ms at best, "
                f"{steady['median_ms']:.2f} ms typically and {steady['max_ms']:.2f} ms at worst "
                f"(worst / best = {steady['max_ms'] / steady['min_ms']:.2f}).",
                "",
            ]
            runs, seconds = (1, 0.5) if quick else (int(leg_option("--repeat")), float(leg_option("--timing-seconds")))
            result = fidelity(work, 1 if quick else args.pairs, runs, seconds, 8, 5)
            # quick runs every side --repeat 1 already: its single-run pairs are the same runs
            single = result if quick else fidelity(work / "single", args.pairs, 1, seconds, 8, 5)
            n = result["repetitions"]

            def listed(label: str) -> str:
                return ", ".join(
                    " / ".join("noisy" if ratio is None else f"{ratio:.3f}" for ratio in pair)
                    for pair in result["ratios"][label]
                )

            lines += [
                f"Eager backend, --threads 1, 8 new tokens, 5 repeats, --timing-seconds {seconds:g}; "
                f"each side one `diag run --repeat {runs}` invocation; {n} repetitions:",
                "",
                "| measure | value |",
                "|---|---|",
                f"| raw compiled per-token medians of single runs | {result['median_ms']:.3f} ms, spread "
                f"{result['spread']:.1%}, CV {result['cv']:.1%} over {result['count']} runs |",
                f"| A/A latency ratios, eager / compiled ({', '.join(result['bases'])}) | {listed('aa')} |",
                f"| A/A false alarms of `diag check` | {result['false_alarms']} of {n} |",
                *([f"| what the false alarms claimed | {'; '.join(result['alarms'])} |"] if result["alarms"] else []),
                f"| A/B ratios, eager / compiled, 10% per-step slowdown injected | {listed('ab')} |",
                f"| A/B slowdowns detected by `diag check` | {result['detected']} of {n} |",
                f"| inconclusive verdicts, A/A / A/B | {result['inconclusive']['aa']} / "
                f"{result['inconclusive']['ab']} of {n} |",
                f"| pairs with a side left out as noisy, A/A / A/B | {result['noisy']['aa']} / "
                f"{result['noisy']['ab']} of {n} |",
                f"| single-run pairs (`--repeat 1` a side): regressions claimed, A/A / A/B | "
                f"{single['false_alarms']} / {single['detected']} of {single['repetitions']} "
                f"(inconclusive: {single['inconclusive']['aa']} / {single['inconclusive']['ab']}) |",
                "",
            ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        # the newest raw tables; docs/BENCHMARKS.md's targets table quotes the figures by hand
        target = REPO / "docs" / "benchmarks" / "raw-latest.md"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"# Raw tables of the newest `python bench/run.py --write`\n\n{text}\n")


if __name__ == "__main__":
    main()
