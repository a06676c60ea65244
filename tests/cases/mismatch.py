"""A compiled pass whose step returns wrong logits: the greedy token is demoted far below its rival.

It stands in for a miscompile, so the mismatch path is exercised end to end.
"""

import torch

from diag.probe.cases import case

from _greedy import full_forward, greedy


def miscompiled(model, input_ids, attention_mask):
    logits = full_forward(model, input_ids, attention_mask)
    demote = torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]) * 1000.0
    return logits - demote


@case("mismatch", "the compiled step returns logits whose greedy token is wrong")
def generate(gen):
    compiled = gen.compile(full_forward) is not full_forward
    greedy(gen, gen.compile(miscompiled) if compiled else full_forward)
