"""Allocates (and touches) memory in 256 MB steps during its compiled generation until the kernel's
OOM killer ends it: run it under a memory limit (tests/test_faults.py puts it in a small memory cgroup)."""

import torch

from diag.probe.cases import case

from _greedy import full_forward, greedy

STEP_MB, LIMIT_MB = 256, 64 * 1024


@case("outgrows_memory", "grows without bound in the compiled pass, until out of memory")
def generate(gen):
    step = gen.compile(full_forward)
    if step is not full_forward:
        held = [torch.ones(STEP_MB * 2**20 // 4) for _ in range(LIMIT_MB // STEP_MB)]  # float32: 4 bytes each
        del held
    greedy(gen, step)
