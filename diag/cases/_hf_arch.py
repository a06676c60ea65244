"""``hf:<model_type>``: a tiny random model of any decoder architecture in the installed transformers,
decoded by transformers' own ``generate`` with a static cache and the forward compiled.

Not listed by ``diag cases`` as one case: ``diag run --case hf:llama`` names the architecture,
``--case hf:all`` every decoder-only causal-LM architecture the target's transformers has.
"""

from diag.probe import hf
from diag.probe.cases import case


@case("hf:*", "a tiny random model of one transformers architecture: generate, static cache, compiled forward")
def generate(gen):
    hf.static_generate(gen, gen.case_name.partition(":")[2])
