"""Synthetic histories for the report: a year of nightlies x a matrix of configs, and a small one
with every situation the front page must answer.

Statuses, counts and timings follow seeded patterns, so the report has transitions, key changes,
repeated runs and trends to draw. ``records(total)`` is the scale benchmark's history (96 rows a
nightly); ``story()`` is the small history the page tests read (31 nightlies x 16 rows, repeats,
a regression and its fix, a regression on the newest build, a flapping row, a batch sweep, a
transformers upgrade and hostile strings).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import random
from pathlib import Path
from typing import Iterator, Optional

from diag import store
from diag.build import identity as build_identity
from diag.store import RunRecord

CASES = ["append_last", "dynamic_slice", "hf_static_cache", "hf_dynamic_cache"]
BACKENDS = ["inductor", "aot_eager", "eager"]
DTYPES = ["float32", "bfloat16"]
GUARDS_ERROR = ("TypeError", "VariableBuilder.__init__() got an unexpected keyword argument 'guards'")
SLICE_ERROR = ("UserError", "Could not guard on data-dependent expression Eq(u0, 16)")


def configs() -> list[dict]:
    rows = []
    for case in CASES:
        for backend in BACKENDS:
            for fullgraph in (1, 0):
                for dtype in DTYPES:
                    for mode in ("default", "reduce-overhead"):
                        rows.append(
                            {"case": case, "backend": backend, "fullgraph": fullgraph, "dtype": dtype, "mode": mode}
                        )
    return rows


def nightly(day: int, rng: random.Random, start: dt.date = dt.date(2025, 1, 1)) -> dict:
    date = start + dt.timedelta(days=day)
    return build_identity(f"2.{8 + day // 120}.0.dev{date:%Y%m%d}", f"{rng.getrandbits(160):040x}", None)


def record(
    build: dict,
    uid: str,
    row: dict,
    status: str,
    rng: random.Random,
    error: Optional[tuple[str, str]] = None,
    transformers: str = "4.57.0",
    slower: float = 1.0,
    guard: str = "tensor 'L['input_ids']' size mismatch at index 1",
) -> RunRecord:
    """One stored run of ``row`` (case, backend, fullgraph, dtype, mode, optional batch_size)."""
    failed = status not in ("pass", "graph_break")
    eager = 2.0 + rng.random() * 0.2
    compiled = eager / (1.5 + rng.random() * 0.1) * slower
    samples = [compiled / 1e3 * (1 + rng.random() * 0.05) for _ in range(20)]
    breaks = (
        []
        if row["fullgraph"] or failed
        else [
            {
                "key": "GB0124",
                "reason": "Tensor.item() call; see https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0124.html",
                "gb_type": "Unsupported Tensor.item() call with capture_scalar_outputs=False",
                "count": 3,
            }
        ]
    )
    return RunRecord(
        build=build,
        run={
            "uid": uid,
            "case": row["case"],
            "case_source": "builtin",
            "config": json.dumps(row),
            "backend": row["backend"],
            "fullgraph": row["fullgraph"],
            "dynamic": "auto",
            "mode": row.get("mode", "default"),
            "device": "cpu",
            "dtype": row["dtype"],
            "batch_size": row.get("batch_size", 1),
            "prompt_length": 16,
            "new_tokens": 16,
            "model": "tiny-random",
            "status": status,
            "error_type": error[0] if error else None,
            "error_message": error[1] if error else None,
            "graph_count": 0 if failed else 1,
            "graph_break_count": None if failed else len(breaks) * 3,
            "recompile_count": 1,
            "hidden_error_count": 0,
            "compile_s": 4 + rng.random(),
            "eager_ms_per_token": eager,
            "compiled_ms_per_token": None if failed else compiled,
            "peak_mem_eager_mb": 500.0,
            "peak_mem_compiled_mb": 650.0,
            "tokens_equal": None if failed else 1,
            "transformers_version": transformers,
            "python": "3.11.7",
        },
        graph_breaks=breaks,
        recompiles=[{"key": "Recompile:ef68e918e5dc", "reason": guard, "decode_step": 1}],
        hidden_errors=[],
        timings=[]
        if failed
        else [{"mode": "compiled", "metric": "decode_step", "unit": "s", "samples": json.dumps(samples)}],
    )


def records(total: int, seed: int = 0) -> Iterator[RunRecord]:
    """``total`` runs spread over daily nightlies, every config once per nightly."""
    rng = random.Random(seed)
    rows = configs()
    produced = 0
    for day in range(max(1, total // len(rows))):
        build = nightly(day, rng)
        for index, row in enumerate(rows):
            if produced >= total:
                return
            broken = row["case"] == "dynamic_slice" and row["fullgraph"] or (100 <= day < 140 and index % 7 == 0)
            status = "fullgraph_error" if broken else ("graph_break" if not row["fullgraph"] else "pass")
            yield record(build, f"synthetic-{day}-{index}", row, status, rng, SLICE_ERROR if broken else None)
            produced += 1


def whole_nightlies(total: int) -> int:
    """How many runs ``records(total)`` makes, for ``total`` of at least a nightly: whole nightlies."""
    return max(1, total // len(configs())) * len(configs())


def write_history(path: Path, total: int) -> int:
    """``records(total)`` stored in a new DB at ``path``, its WAL written into the file; how many runs."""
    _store(path, records(total))
    return whole_nightlies(total)


def add_nightly(path: Path, made: int) -> None:
    """The nightly after the ``made`` runs of ``write_history``, stored in its DB."""
    _store(path, itertools.islice(records(made + len(configs())), made, None))


def _store(path: Path, runs: Iterator[RunRecord]) -> None:
    db = store.open_db(path)
    store.save_runs(db, runs)
    db.conn.execute("PRAGMA wal_checkpoint(FULL)")
    db.conn.close()


STORY_NIGHTLIES = 31
REGRESSED, FIXED = 20, 26  # append_last fullgraph fails from nightly 20 up to 25; 26 fixes it
UPGRADE = 8  # transformers 4.56.2 -> 4.57.0
HOSTILE = "\u202egnirts\u202c <b>$x^2$</b>"


def story(seed: int = 0, nightlies: int = STORY_NIGHTLIES) -> Iterator[RunRecord]:
    """The front page's questions in a small history (the first ``nightlies`` nightlies).

    - append_last (inductor and aot_eager, fullgraph) fails on nightlies 20-25 with the 2023
      ``guards`` TypeError, and works again from 26;
    - hf_static_cache inductor fullgraph starts failing on the newest nightly (30);
    - dynamic_slice fullgraph never works; hf_dynamic_cache aot_eager no-fullgraph flaps on nightlies 2-8;
    - every row of the newest three nightlies runs 3 times: on the newest, append_last aot_eager
      no-fullgraph crashes, errors, then passes;
    - append_last aot_eager fullgraph also runs at batch 8 (a sweep), failing at 8 throughout;
    - transformers moves from 4.56.2 to 4.57.0 at nightly 8, where the flapping row works again;
    - two architecture cases: hf:llama works, hf:gemma3 stops compiling fullgraph on nightly 5;
    - a case named with a right-to-left override and markup, one run on the newest nightly, whose
      recompile's guard is a 20,000-character line with no space.
    """
    rng = random.Random(seed)
    rows = [
        {"case": case, "backend": backend, "fullgraph": fullgraph, "dtype": "float32"}
        for case in CASES
        for backend in ("inductor", "aot_eager")
        for fullgraph in (1, 0)
    ]
    for day in range(nightlies):
        build = nightly(day, rng)
        transformers = "4.56.2" if day < UPGRADE else "4.57.0"
        repeats = 3 if day >= nightlies - 3 else 1
        for index, row in enumerate(rows):
            for repeat in range(repeats):
                status = "pass" if row["fullgraph"] else "graph_break"
                error = None
                if row["case"] == "append_last" and row["fullgraph"] and REGRESSED <= day < FIXED:
                    status, error = "compile_error", GUARDS_ERROR
                elif (
                    row["case"] == "hf_static_cache"
                    and row["backend"] == "inductor"
                    and row["fullgraph"]
                    and day == STORY_NIGHTLIES - 1
                ):
                    status, error = "fullgraph_error", ("Unsupported", "Dynamic slicing with Tensor arguments")
                elif row["case"] == "dynamic_slice" and row["fullgraph"]:
                    status, error = "fullgraph_error", SLICE_ERROR
                elif (
                    row["case"] == "hf_dynamic_cache"
                    and row["backend"] == "aot_eager"
                    and not row["fullgraph"]
                    and 2 <= day <= 8
                    and day % 2
                ):
                    status, error = "compile_error", ("RuntimeError", "flaky lowering")
                elif (
                    row["case"] == "append_last"
                    and row["backend"] == "aot_eager"
                    and not row["fullgraph"]
                    and day == STORY_NIGHTLIES - 1
                    and repeat < 2
                ):
                    status, error = (
                        ("crash", ("Signal", "SIGSEGV"))
                        if repeat == 0
                        else ("compile_error", ("RuntimeError", "out of memory"))
                    )
                yield record(build, f"story-{day}-{index}-{repeat}", row, status, rng, error, transformers)
            if row["case"] == "append_last" and row["backend"] == "aot_eager" and row["fullgraph"]:
                yield record(
                    build,
                    f"story-{day}-{index}-b8",
                    {**row, "batch_size": 8},
                    "compile_error",
                    rng,
                    ("RuntimeError", "batch 8 does not fit the static cache"),
                    transformers,
                )
        for arch, fullgraph_error in (("hf:llama", None), ("hf:gemma3", ("Unsupported", "Data-dependent branching"))):
            for fullgraph in (1, 0):
                row = {"case": arch, "backend": "aot_eager", "fullgraph": fullgraph, "dtype": "float32"}
                failed = fullgraph and fullgraph_error and day >= 5
                yield record(
                    build,
                    f"story-{day}-{arch}-{fullgraph}",
                    row,
                    "fullgraph_error" if failed else ("pass" if fullgraph else "graph_break"),
                    rng,
                    fullgraph_error if failed else None,
                    transformers,
                )
        if day == nightlies - 1:
            yield record(
                build,
                "story-hostile",
                {**rows[0], "case": HOSTILE},
                "pass",
                rng,
                guard="___check_tensors(" + "L['past_key_values'][0],_" * 800 + ")",
            )


# Change points. A build's figure of a row moves from night to night by these coefficients of
# variation (log-normal): latency figures are medians of hundreds of decode steps whose 95% interval
# is within +-0.4% to +-1.4% on an idle runner (docs/BENCHMARKS.md, honest timing), so 1%; a cold
# compile is one sample, 1.5%, a warm one 2%; a callgrind count spread 0.18% over 5 counts, so 0.1%;
# guard time is one figure a run, 2%; peak memory repeats within 0.2%, so 0.1%. Counts are exact.
NOISE = {
    "compile_s": 0.015,
    "compile_warm_s": 0.02,
    "compile_instructions": 0.001,
    "guard_latency_us": 0.02,
    "eager_ms_per_token": 0.01,
    "compiled_ms_per_token": 0.01,
    "peak_mem_eager_mb": 0.001,
    "peak_mem_compiled_mb": 0.001,
}
BASE = {
    "compile_s": 4.0,
    "compile_warm_s": 1.5,
    "compile_instructions": 1.2e9,
    "guard_latency_us": 12.0,
    "eager_ms_per_token": 2.0,
    "compiled_ms_per_token": 1.3,
    "peak_mem_eager_mb": 500.0,
    "peak_mem_compiled_mb": 650.0,
}
TIMED = ("compile_s", "compile_warm_s", "guard_latency_us", "eager_ms_per_token", "compiled_ms_per_token")
MARKED = 0.03  # runs the noise rules mark (a noisy latency, a compile that waited), each far off
STRAY = 0.02  # runs the rules did not mark that are still off by 5-30%
STABLE = "2.7.1"  # the pinned release a drift history's runner also runs each night


def shape(kind: str, day: int, at: int, size: float) -> float:
    """The factor ``kind`` puts on a figure on ``day``: ``step`` by ``size`` from ``at``; ``creep`` by
    ``size`` a week for four weeks, ``at`` the first night that moved; ``none``."""
    if kind == "step":
        return 1 + size if day >= at else 1.0
    if kind == "creep":
        return (1 + size) ** (4 * min(max((day - at + 1) / 28, 0.0), 1.0))
    return 1.0


def drift(
    seed: int,
    nightlies: int = 365,
    kind: str = "none",
    metric: str = "compiled_ms_per_token",
    at: int = 200,
    size: float = 0.05,
    row_count: int = 1,
    runner_at: Optional[int] = None,
    twin: bool = True,
    repeats: int = 1,
    start: dt.date = dt.date(2025, 1, 1),
) -> Iterator[RunRecord]:
    """A history for change points: ``row_count`` rows a nightly (one run each), and with ``twin`` the
    stable release's run of each row on the same night. ``kind`` moves ``metric`` of the first row
    from night ``at`` (``shape``); from night ``runner_at`` the runner is 8% slower on every timed
    figure, the twin's included. Noise per metric as ``NOISE``, with ``MARKED`` and ``STRAY`` runs;
    ``repeats`` runs of each (the nightly leg runs ``--repeat 5``)."""
    rng = random.Random(seed)
    chosen = configs()[:row_count]
    stable = build_identity(STABLE, f"{rng.getrandbits(160):040x}", None)
    for day in range(nightlies):
        build = nightly(day, rng, start)
        for index, row in enumerate(chosen):
            for side, on in (("nightly", build), ("stable", stable)) if twin else (("nightly", build),):
                for repeat in range(repeats):
                    moved = shape(kind, day, at, size) if index == 0 and side == "nightly" else 1.0
                    runner = 1.08 if runner_at is not None and day >= runner_at else 1.0
                    uid = f"drift-{side}-{day}-{index}-{repeat}"
                    made = record(on, uid, {**row, "fullgraph": 0}, "graph_break", rng)
                    made.run["started_at"] = (
                        f"{start + dt.timedelta(days=day):%Y-%m-%d}T02:{index % 60:02d}:{repeat:02d}"
                    )
                    _drift_figures(made.run, rng, metric, moved, runner)
                    yield made


def _drift_figures(run: dict, rng: random.Random, metric: str, moved: float, runner: float) -> None:
    waited, noisy = rng.random() < MARKED, rng.random() < MARKED
    for name, base in BASE.items():
        value = base * math.exp(rng.gauss(0, NOISE[name])) * (moved if name == metric else 1.0)
        if name in TIMED:
            value *= runner * (1 + rng.uniform(0.05, 0.3) if rng.random() < STRAY else 1.0)
            if (waited and name in ("compile_s", "compile_warm_s")) or (noisy and name.endswith("per_token")):
                value *= rng.uniform(1.3, 3.0)
        run[name] = value
    run["timing_noisy"], run["timing_note"] = (1, "steps in two clusters") if noisy else (0, None)
    run["compile_noisy"], run["compile_note"] = (1, "compile waited") if waited else (0, None)
