"""dynamic_slice on a torch that offers what torch 2.0 offered, for the collectors' fallbacks.

At import (before any collector is set up) this removes from the running torch what 2.0 did
not have: ``torch._logging.set_logs`` (so no per-artifact logs: no graph_breaks or recompiles
log, and DEBUG only through the loggers' levels) and dynamo's bytecode hook (so no depyf).
dynamo's counters stay, as on 2.0. The run must still complete, name what is missing, and
count its graph breaks from the counters.
"""

import torch
import torch._dynamo.convert_frame
import torch._logging

from diag.cases.dynamic_slice import decode_step, drive
from diag.probe.cases import case

for owner, name in ((torch._logging, "set_logs"), (torch._dynamo.convert_frame, "register_bytecode_hook")):
    if hasattr(owner, name):
        delattr(owner, name)


@case("old_torch", "dynamic_slice with set_logs and the bytecode hook removed from torch (as on 2.0)")
def generate(gen):
    drive(gen, gen.compile(decode_step))
