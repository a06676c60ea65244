"""ab_variant, version A: the append_last loop unchanged."""

from diag.probe.cases import case

import _shared  # noqa: F401 (the shared module beside the case is what this case is for)
import append_last


@case("ab_variant", "append_last, unchanged (the A side of A/B tests)")
def generate(gen):
    append_last.generate(gen)
