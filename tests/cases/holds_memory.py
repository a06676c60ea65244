"""Holds 100 MB more while its compiled decode runs than while its eager decode runs: the compiled
peak memory diag records must come out about 100 MB above the eager one."""

import torch

from diag.probe.cases import case

from _greedy import full_forward, greedy

HELD_MB = 100


@case("holds_memory", "holds 100 MB more during compiled decode than during eager decode")
def generate(gen):
    step = gen.compile(full_forward)
    held = torch.ones(HELD_MB * 2**20 // 4) if step is not full_forward else None  # float32: 4 bytes each
    greedy(gen, step)
    del held
