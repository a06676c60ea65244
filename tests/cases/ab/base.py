"""ab_variant, version A: the append_last loop unchanged."""

import _shared  # noqa: F401 (the shared module beside the case is what this case is for)
import append_last

from diag.probe.cases import case


@case("ab_variant", "append_last, unchanged (the A side of A/B tests)")
def generate(gen):
    append_last.generate(gen)
