"""Compiles with an error in the timing pass, and dies by SIGSEGV in the diagnosis pass.

The timing pass (logging off) prints a swallowed TypeError's traceback to stderr, as torch
2.0 did, then fails to compile; the diagnosis pass (torch's DEBUG logs on) crashes before a
verdict. What the timing pass learned must survive in the stored run.
"""

import logging
import os
import signal
import traceback

from diag.probe.cases import case

from _greedy import full_forward, greedy


@case("dies_in_diagnosis", "compile error in the timing pass, SIGSEGV in the diagnosis pass")
def generate(gen):
    if gen.compile(full_forward) is not full_forward:
        if logging.getLogger("torch._dynamo").isEnabledFor(logging.DEBUG):
            os.kill(os.getpid(), signal.SIGSEGV)  # the diagnosis pass
        try:
            raise TypeError("VariableBuilder.__init__() got an unexpected keyword argument 'guards'")
        except TypeError:
            traceback.print_exc()
        raise RuntimeError("arg mismatch inlining")
    greedy(gen, full_forward)
