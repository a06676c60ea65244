"""dynamic_slice, whose generate marks torch's loggers disabled by hand at its first decode step (the
attribute logging.config sets on loggers it does not configure), and sets the process-wide disable
level without logging.disable."""

import logging
import sys
from pathlib import Path

from diag.probe.cases import case

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "diag" / "cases"))
import dynamic_slice  # after sys.path names the built-in cases


@case("disables_torch_loggers", "dynamic_slice with torch's loggers disabled by hand")
def generate(gen):
    for name in ("torch", "torch._dynamo", "torch._inductor"):
        logging.getLogger(name).disabled = True
    logging.root.manager.disable = logging.CRITICAL
    dynamic_slice.generate(gen)
