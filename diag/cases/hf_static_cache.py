"""transformers' LlamaForCausalLM with its StaticCache; the forward is compiled for decode.

transformers documents compiling ``model.forward`` and decoding with a static
cache (in-place cache update at fixed shapes). The prompt is prefilled by the
uncompiled forward; every decode step calls the compiled one.
"""

from diag.probe import hf
from diag.probe.cases import case


@case("hf_static_cache", "transformers LlamaForCausalLM, StaticCache, compiled forward for decode")
def generate(gen):
    hf.greedy(gen, hf.static_cache(gen), fixed_mask=True)
