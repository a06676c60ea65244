"""dynamic_slice, whose generate first silences every logger of the process with
logging.disable(logging.CRITICAL) (as third-party code may, to keep its output quiet)."""

import logging
import sys
from pathlib import Path

from diag.probe.cases import case

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "diag" / "cases"))
import dynamic_slice  # after sys.path names the built-in cases


@case("disables_logging", "dynamic_slice after logging.disable(logging.CRITICAL)")
def generate(gen):
    logging.disable(logging.CRITICAL)
    dynamic_slice.generate(gen)
