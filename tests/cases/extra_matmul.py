"""append_last with one more op per decode step: a matmul outside the compiled step, its size from
DIAG_TEST_EXTRA_MM (default 128): the known answer for ``diag race --profile``'s attribution."""

import os

from diag.cases.append_last import decode_step, drive
from diag.probe.cases import case

SIZE = int(os.environ.get("DIAG_TEST_EXTRA_MM") or 128)


@case("extra_matmul", "append_last plus one matmul per decode step, outside the compiled step")
def generate(gen):
    import torch

    weights = torch.randn(SIZE, SIZE, generator=torch.Generator().manual_seed(0))
    step = gen.compile(decode_step)

    def with_extra(*args):
        logits = step(*args)
        torch.mm(weights, weights)
        return logits

    drive(gen, with_extra)
