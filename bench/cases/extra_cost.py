"""append_last, each decode step made DIAG_BENCH_SLOWDOWN (a fraction, default 0) slower.

The benchmark's A/B fidelity check runs this case with no slowdown and then with 0.10, and asks
`diag check` whether it sees the change. The extra is a busy wait of that fraction of the step's
own body, so the step is 10% slower whatever speed the host runs at just then, as a step doing
10% more work would be.
"""

import os
import sys
import time
from pathlib import Path

from diag.probe.cases import case

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "diag" / "cases"))
import append_last  # after sys.path names the built-in cases


@case("bench_extra_cost", "append_last, each decode step DIAG_BENCH_SLOWDOWN (a fraction) slower")
def generate(gen):
    slowed_generate(gen, float(os.environ.get("DIAG_BENCH_SLOWDOWN", "0")))


def slowed_generate(gen, fraction):
    """append_last with each decode step ``fraction`` slower (the twin passes its own fraction:
    raced in one process, the two cases read their fractions from one environment)."""
    steps = gen.steps

    def slowed():
        for index in steps():  # the step's clock runs from here until this loop asks for the next index
            start = time.perf_counter()
            yield index
            deadline = time.perf_counter() + fraction * (time.perf_counter() - start)
            while time.perf_counter() < deadline:  # busy: sleeping is too coarse for a millisecond
                pass

    gen.steps = slowed
    append_last.generate(gen)
