"""How well change points date what moved, on bench/synthetic.py's drift histories (docs/BENCHMARKS.md,
"Change points").

    python bench/changes.py                      # every part, 20 seeds
    python bench/changes.py --parts step,aa --seeds 5

Parts:
- step: a 5% step of one metric of one row on a random night of 365; dated exactly, per metric, with
  one run a night (step) and five (step5, the nightly leg's --repeat 5).
- creep: 3% a week for 4 weeks; its start dated within 3 nightlies, and the night `check --changes`
  first fails (tonight's history against the one without its newest build) with the start it names.
- aa: histories with no change, one row with every metric; false change points per row.
- runner: 4 rows and the stable twin, the runner 8% slower from one night on every timed figure;
  change points reported as torch's (none should be), with the twin and without it.
- speed: `diag changes` on the 50,000-run history of the report benchmark, in a process of its own.
The accuracy parts run in this process on the records the store would hold (ids given per build);
the speed part through SQLite and the command line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO

sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
import synthetic

from diag.verdicts import changes as changes_of
from diag.verdicts import regress

METRICS = list(changes_of.METRICS)
STEP_METRICS = ["compiled_ms_per_token", "eager_ms_per_token", "compile_s", "compile_warm_s", "guard_latency_us"]
STEP_METRICS += ["compile_instructions", "peak_mem_compiled_mb"]


def in_memory(records) -> tuple[list[dict], dict[int, dict]]:
    """Runs and builds as the store gives them: each build an id, each run its build's id."""
    builds: dict[str, dict] = {}
    runs = []
    for record in records:
        build = builds.setdefault(record.build["build_key"], {**record.build, "id": len(builds) + 1})
        runs.append({**record.run, "torch_build_id": build["id"]})
    return runs, {b["id"]: b for b in builds.values()}


def search(records, stable: bool = True, metrics=METRICS) -> list[changes_of.Change]:
    runs, builds = in_memory(records)
    twin = next((b for b in builds.values() if b["version"] == synthetic.STABLE), None) if stable else None
    series = changes_of.series_of(runs, builds, metrics, skip=twin["id"] if twin else None)
    twins = changes_of.twin_nights(runs, twin["id"], metrics) if twin else None
    return changes_of.changes(series, twins, twin["version"] if twin else None)


def night_of(change: changes_of.Change) -> int:
    """The index of the change's first build in its history (day 0 is 2025-01-01)."""
    return night_index(change.first)


def step(seeds: int, repeats: int = 1) -> dict:
    out: dict = {"runs_a_night": repeats}
    for metric in STEP_METRICS:
        exact, off = 0, []
        for seed in range(seeds):
            at = random.Random(seed).randrange(60, 300)
            found = [
                c
                for c in search(synthetic.drift(seed, kind="step", metric=metric, at=at, repeats=repeats))
                if c.metric == metric
            ]
            # exact: the change's range names the nightly (its build before the step has no point where its
            # runs were all marked noisy or waited; the range then runs from the build before that)
            exact += any(night_index(c.before) < at <= night_of(c) and c.shift.kind == "step" for c in found)
            off += [night_of(c) - at for c in found]
        out[metric] = {"exact": exact, "seeds": seeds, "dated_off_by": sorted(set(off))}
    return out


def creep(seeds: int) -> dict:
    within, failed_on, named = 0, [], []
    for seed in range(seeds):
        at = random.Random(seed).randrange(60, 300)
        records = list(synthetic.drift(seed, kind="creep", size=0.03, at=at))
        found = [c for c in search(records) if c.metric == "compiled_ms_per_token"]
        within += any(abs(night_of(c) - at) <= 3 for c in found)
        night, start = gate_nights(records, at)
        failed_on.append(None if night is None else night - at)
        named.append(None if start is None else start - at)
    return {
        "start_within_3": within,
        "seeds": seeds,
        "check_fails_night_after_start": failed_on,
        "names_start_off_by": named,
    }


def gate_nights(records, at: int) -> tuple[int | None, int | None]:
    """The first night from ``at`` on whose ``check --changes`` fails, and the start it names."""
    runs, builds = in_memory(records)
    twin = next(b for b in builds.values() if b["version"] == synthetic.STABLE)
    for night in range(at, at + 60):
        shown = [b for b in builds.values() if b["id"] != twin["id"] and night_index(b) <= night]
        kept = {b["id"]: b for b in shown}
        kept[twin["id"]] = twin
        series = changes_of.series_of(runs, kept, ["compiled_ms_per_token"], skip=twin["id"])
        newest = max(shown, key=night_index)["id"]
        twins = changes_of.twin_nights(
            [r for r in runs if r["started_at"][:10] <= newest_night(shown)], twin["id"], ["compiled_ms_per_token"]
        )
        now = changes_of.changes(series, twins, synthetic.STABLE)
        before = changes_of.changes(changes_of.without(series, {newest}), twins, synthetic.STABLE)
        new = changes_of.tonight(now, before, regress.Thresholds().limit)
        if new:
            return night, night_of(new[0])
    return None, None


def night_index(build) -> int:
    return (dt.date.fromisoformat(build["nightly_date"]) - dt.date(2025, 1, 1)).days


def newest_night(builds: list[dict]) -> str:
    return max(b["nightly_date"] for b in builds)


def aa(seeds: int) -> dict:
    false = [len(search(synthetic.drift(seed, kind="none"))) for seed in range(seeds)]
    return {"false_per_row": statistics.mean(false), "most": max(false), "seeds": seeds, "metrics": len(METRICS)}


def runner(seeds: int) -> dict:
    out = {"with_twin_torch": [], "with_twin_runner": [], "without_twin": []}
    for seed in range(seeds):
        records = list(synthetic.drift(seed, kind="none", row_count=4, runner_at=200))
        with_twin = search(records)
        out["with_twin_torch"].append(sum(c.runner is None for c in with_twin))
        out["with_twin_runner"].append(sum(c.runner is not None for c in with_twin))
        out["without_twin"].append(len(search(records, stable=False)))
    return {**out, "seeds": seeds, "rows": 4}


def speed(repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "history.db"
        made = synthetic.write_history(db, 50_000)
        walls = []
        for _ in range(repeats):
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "diag", "changes", "--db", str(db), "--json"], capture_output=True, text=True
            )
            walls.append(time.perf_counter() - started)
            if done.returncode:
                raise SystemExit(done.stderr)
        found = json.loads(done.stdout)
    return {
        "runs": made,
        "walls_s": [round(w, 2) for w in walls],
        "changes": len(found["changes"]),
        "series": found["series"],
    }


def step_repeated(seeds: int) -> dict:
    """``step`` with 5 runs a night, as the nightly leg's ``--repeat 5``: a point is their median."""
    return step(seeds, repeats=5)


PARTS = {"step": step, "step5": step_repeated, "creep": creep, "aa": aa, "runner": runner, "speed": speed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3, help="of the speed part")
    args = parser.parse_args()
    for part in args.parts.split(","):
        started = time.perf_counter()
        result = PARTS[part](args.repeats if part == "speed" else args.seeds)
        print(json.dumps({"part": part, **result, "bench_s": round(time.perf_counter() - started, 1)}), flush=True)


if __name__ == "__main__":
    main()
