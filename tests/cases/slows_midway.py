"""A host that slows down partway through the timing pass: from a process's 9th generation on,
every decode step takes 5 ms longer. Timed eager block first, compiled block after, the compiled
steps would all be slow and the eager ones all fast."""

import time

from diag.probe.cases import case

from _greedy import full_forward, greedy

SLOW_FROM = 9
CALLS = [0]


def slowed(step):
    def run(model, ids, mask):
        if CALLS[0] >= SLOW_FROM:
            time.sleep(0.005)
        return step(model, ids, mask)

    return run


@case("slows_midway", "every decode step 5 ms slower from the process's 9th generation on")
def generate(gen):
    CALLS[0] += 1
    greedy(gen, slowed(gen.compile(full_forward)))
