"""Dies by SIGSEGV as soon as the compiled pass starts (the eager pass runs normally)."""

import os
import signal
import sys

from diag.probe.cases import case

from _greedy import full_forward, greedy


@case("segfault", "crashes with SIGSEGV in the compiled pass")
def generate(gen):
    if gen.compile(full_forward) is not full_forward:
        print("segfault case: about to crash", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    greedy(gen, full_forward)
