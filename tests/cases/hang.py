"""Hangs in the compiled pass, so the probe's timeout must end it."""

import time

from diag.probe.cases import case

from _greedy import full_forward, greedy


@case("hang", "sleeps forever in the compiled pass")
def generate(gen):
    if gen.compile(full_forward) is not full_forward:
        time.sleep(3600)
    greedy(gen, full_forward)
