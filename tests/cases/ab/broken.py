"""ab_variant, version C: regresses to the dynamic_slice loop, which fullgraph cannot capture."""

from diag.probe.cases import case

import _shared  # noqa: F401 (the shared module beside the case is what this case is for)
import dynamic_slice


@case("ab_variant", "a data-dependent slice: pass -> fullgraph_error")
def generate(gen):
    dynamic_slice.generate(gen)
