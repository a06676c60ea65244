"""A decode step that calls a custom op with no fake implementation: dynamo cannot trace it and
breaks the graph at the user's call of the op (not inside torch's custom-op wrapper)."""

import torch

from diag.probe.cases import case

from _greedy import full_forward, greedy


@torch.library.custom_op("diag_tests::scale_rows", mutates_args=())
def scale_rows(logits: torch.Tensor) -> torch.Tensor:
    return logits * 1.0


@scale_rows.register_fake
def _(logits):
    # data-dependent: the fake implementation reads a value, which dynamo cannot trace
    return logits * float(logits.sum().item() != 0)


def scaled_forward(model, input_ids, attention_mask):
    logits = full_forward(model, input_ids, attention_mask)
    return scale_rows(logits)  # the break: the op has no fake implementation


@case("custom_op_break", "a custom op without a fake implementation, called from the decode step")
def generate(gen):
    step = gen.compile(scaled_forward)
    greedy(gen, lambda model, ids, mask: step(model, ids, mask))
