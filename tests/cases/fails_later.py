"""append_last until its fourth generation, which raises: a variant that compiles and warms up, then
fails partway through a race (tests/test_race.py)."""

import sys
from pathlib import Path

from diag.probe.cases import case

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "diag" / "cases"))
import append_last  # after sys.path names the built-in cases

CALLS = [0]


@case("fails_later", "append_last, raising from its fourth generation on")
def generate(gen):
    CALLS[0] += 1
    if CALLS[0] >= 4:
        raise RuntimeError("fails_later: raised at generation 4, as asked")
    append_last.generate(gen)
