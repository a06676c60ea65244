"""ab_variant, version B: the append_last loop with 2 ms of extra work in every decode step."""

import time

from diag.probe.cases import case

import _shared  # noqa: F401 (the shared module beside the case is what this case is for)
import append_last


@case("ab_variant", "append_last plus an injected per-step cost")
def generate(gen):
    steps = gen.steps

    def slowed():
        for index in steps():
            time.sleep(0.002)
            yield index

    gen.steps = slowed
    append_last.generate(gen)
