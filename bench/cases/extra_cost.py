"""append_last with an optional extra cost per decode step (DIAG_BENCH_EXTRA_S seconds of busy work).

The benchmark's A/B fidelity check runs this case once with no extra cost and once with 10% of the
measured per-token latency added, and asks `diag check` whether it sees the slowdown.
"""

import os
import sys
import time
from pathlib import Path

from diag.probe.cases import case

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cases"))
import append_last  # noqa: E402


@case("bench_extra_cost", "append_last plus DIAG_BENCH_EXTRA_S seconds of work per decode step")
def generate(gen):
    extra = float(os.environ.get("DIAG_BENCH_EXTRA_S", "0"))
    steps = gen.steps

    def with_cost():
        for index in steps():
            deadline = time.perf_counter() + extra
            while time.perf_counter() < deadline:  # busy-wait: sleep granularity is too coarse
                pass
            yield index

    gen.steps = with_cost
    append_last.generate(gen)
