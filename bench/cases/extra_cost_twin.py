"""bench_extra_cost under another name, each decode step DIAG_BENCH_SLOWDOWN_TWIN (a fraction) slower:
the variant A/A and A/B check of bench/honesty.py compares the two as two variants of one build."""

import os
import sys
from pathlib import Path

from diag.probe.cases import case

sys.path.insert(0, str(Path(__file__).resolve().parent))
import extra_cost  # after sys.path names this folder


@case("bench_extra_cost_twin", "bench_extra_cost, each decode step DIAG_BENCH_SLOWDOWN_TWIN (a fraction) slower")
def generate(gen):
    extra_cost.slowed_generate(gen, float(os.environ.get("DIAG_BENCH_SLOWDOWN_TWIN", "0")))
