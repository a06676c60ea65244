"""Killed by SIGKILL in the compiled pass, as the kernel's OOM killer ends a process."""

import os
import signal

from diag.probe.cases import case

from _greedy import full_forward, greedy


@case("oom_kill", "SIGKILL in the compiled pass")
def generate(gen):
    if gen.compile(full_forward) is not full_forward:
        os.kill(os.getpid(), signal.SIGKILL)
    greedy(gen, full_forward)
