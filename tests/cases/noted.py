"""A case that says how it ran (Generation.note) and then decodes with the cache-free loop; with
DIAG_TEST_NOTED_RAISES set it raises after the note, as a case whose fallback failed too would."""

import os

from diag.probe.cases import case

from _greedy import full_forward, greedy


@case("noted", "a case that notes the fallback it took")
def generate(gen):
    gen.note("no cache here: every step recomputes the prefix")
    gen.note("no cache here: every step recomputes the prefix")  # said twice, stored once
    if os.environ.get("DIAG_TEST_NOTED_RAISES"):
        raise RuntimeError("the fallback failed as well")
    greedy(gen, gen.compile(full_forward))
