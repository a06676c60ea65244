"""Synthetic history for scale benchmarks: a year of nightlies x a matrix of configs.

Statuses, counts and timings follow simple seeded patterns (a regression that
appears and is fixed again, noisy latencies), so the report has transitions,
key changes and trends to draw.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from typing import Iterator

from diag.store import RunRecord, build_identity

CASES = ["append_last", "dynamic_slice", "hf_static_cache", "hf_dynamic_cache"]
BACKENDS = ["inductor", "aot_eager", "eager"]
DTYPES = ["float32", "bfloat16"]


def configs() -> list[dict]:
    rows = []
    for case in CASES:
        for backend in BACKENDS:
            for fullgraph in (1, 0):
                for dtype in DTYPES:
                    for mode in ("default", "reduce-overhead"):
                        rows.append({"case": case, "backend": backend, "fullgraph": fullgraph, "dtype": dtype,
                                     "mode": mode})
    return rows


def records(total: int, seed: int = 0) -> Iterator[RunRecord]:
    """``total`` runs spread over daily nightlies, every config once per nightly."""
    rng = random.Random(seed)
    rows = configs()
    nightlies = max(1, total // len(rows))
    start = dt.date(2025, 1, 1)
    produced = 0
    for day in range(nightlies):
        date = start + dt.timedelta(days=day)
        version = f"2.{8 + day // 120}.0.dev{date:%Y%m%d}"
        build = build_identity(version, f"{rng.getrandbits(160):040x}", None)
        for index, row in enumerate(rows):
            if produced >= total:
                return
            broken = row["case"] == "dynamic_slice" and row["fullgraph"] or (100 <= day < 140 and index % 7 == 0)
            status = "fullgraph_error" if broken else ("graph_break" if not row["fullgraph"] else "pass")
            eager = 2.0 + rng.random() * 0.2
            compiled = eager / (1.5 + rng.random() * 0.1)
            samples = [compiled / 1e3 * (1 + rng.random() * 0.05) for _ in range(20)]
            yield RunRecord(
                build=build,
                run={"uid": f"synthetic-{day}-{index}", "case": row["case"], "case_source": "builtin", "config": json.dumps(row),
                     "backend": row["backend"], "fullgraph": row["fullgraph"], "dynamic": "auto",
                     "mode": row["mode"], "device": "cpu", "dtype": row["dtype"], "batch_size": 1,
                     "prompt_length": 16, "new_tokens": 16, "model": "tiny-random", "status": status,
                     "error_type": "UserError" if broken else None,
                     "error_message": "Could not guard on data-dependent expression" if broken else None,
                     "graph_count": 0 if broken else 1, "graph_break_count": 0 if row["fullgraph"] else 3,
                     "recompile_count": 1, "hidden_error_count": 0, "compile_s": 4 + rng.random(),
                     "eager_ms_per_token": eager, "compiled_ms_per_token": None if broken else compiled,
                     "peak_mem_eager_mb": 500.0, "peak_mem_compiled_mb": 650.0, "tokens_equal": 1},
                graph_breaks=[] if row["fullgraph"] else [{"key": "GB0124", "reason": "Tensor.item()", "count": 3}],
                recompiles=[{"key": "Recompile:abc", "reason": "size mismatch", "decode_step": 1}],
                hidden_errors=[],
                timings=[{"mode": "compiled", "metric": "decode_step", "unit": "s", "samples": json.dumps(samples)}],
            )
            produced += 1
