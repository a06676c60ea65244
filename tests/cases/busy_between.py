"""append_last with a known amount of Python work between decode steps, outside the compiled step:
a spin of DIAG_TEST_BETWEEN_MS (default 2) ms of wall time after each step's compiled call."""

import os
import time

from diag.cases.append_last import decode_step, drive
from diag.probe.cases import case

SPIN_S = float(os.environ.get("DIAG_TEST_BETWEEN_MS") or 2) / 1e3


@case("busy_between", "append_last plus a fixed spin of Python work between decode steps")
def generate(gen):
    step = gen.compile(decode_step)

    def with_work(*args):
        logits = step(*args)
        until = time.perf_counter() + SPIN_S
        while time.perf_counter() < until:
            pass
        return logits

    drive(gen, with_work)
