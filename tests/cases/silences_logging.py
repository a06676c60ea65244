"""dynamic_slice, whose generate first turns torch's compile logging off through torch._logging.set_logs
(as third-party decode code may, to keep its output quiet)."""

import logging
import sys
from pathlib import Path

import torch

from diag.probe.cases import case

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "diag" / "cases"))
import dynamic_slice  # after sys.path names the built-in cases


@case("silences_logging", "dynamic_slice after torch._logging.set_logs(dynamo=CRITICAL, recompiles=False, ...)")
def generate(gen):
    torch._logging.set_logs(dynamo=logging.CRITICAL, recompiles=False, graph_breaks=False, aot=logging.CRITICAL)
    dynamic_slice.generate(gen)
