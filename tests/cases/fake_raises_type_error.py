"""A decode step calling a custom op whose fake implementation raises a TypeError that does not say
"argument", with dynamo told to suppress errors (as third-party code does to keep running): dynamo
cannot trace the op, gives up on the frame and runs it eagerly. torch names the one frame it gave up
on twice, at two lines: fake_tensor's record of the TypeError at the op's call, and convert_frame's
fallback, at the frame's first line, whose traceback ends in that TypeError. One frame, one hidden
error."""

import torch

from diag.probe.cases import case

from _greedy import full_forward, greedy


@torch.library.custom_op("diag_tests::halve_rows", mutates_args=())
def halve_rows(logits: torch.Tensor) -> torch.Tensor:
    return logits * 0.5


@halve_rows.register_fake
def _(logits):
    raise TypeError("halve_rows has no meta kernel for this layout")


def halved_forward(model, input_ids, attention_mask):
    logits = full_forward(model, input_ids, attention_mask)
    return halve_rows(logits) * 2.0


@case("fake_raises_type_error", "a custom op whose fake implementation raises a TypeError")
def generate(gen):
    torch._dynamo.config.suppress_errors = True
    greedy(gen, gen.compile(halved_forward))
