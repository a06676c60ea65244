"""Hangs in the compiled pass, so the probe's timeout must end it."""

import sys
import time
from pathlib import Path

from diag.probe.cases import case

sys.path.insert(0, str(Path(__file__).parent))
from _greedy import full_forward, greedy  # noqa: E402


@case("hang", "sleeps forever in the compiled pass")
def generate(gen):
    if gen.compile(full_forward) is not full_forward:
        time.sleep(3600)
    greedy(gen, full_forward)
