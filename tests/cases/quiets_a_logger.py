"""dynamic_slice, whose generate first sets torch._dynamo's logger to CRITICAL by hand (not through set_logs)."""

import logging
import sys
from pathlib import Path

from diag.probe.cases import case

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "diag" / "cases"))
import dynamic_slice  # after sys.path names the built-in cases


@case("quiets_a_logger", "dynamic_slice with torch._dynamo's logger set to CRITICAL by hand before it runs")
def generate(gen):
    logging.getLogger("torch._dynamo").setLevel(logging.CRITICAL)
    dynamic_slice.generate(gen)
