"""transformers' LlamaForCausalLM with the default growing DynamicCache; compiled forward.

The cache grows by one position per step, so the compiled forward sees new
shapes each step: expect recompiles until dynamic shapes kick in.
"""

from diag.probe import hf
from diag.probe.cases import case


@case("hf_dynamic_cache", "transformers LlamaForCausalLM, default DynamicCache (growing), compiled forward")
def generate(gen):
    hf.greedy(gen, hf.dynamic_cache(gen), fixed_mask=False)
