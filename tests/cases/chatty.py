"""append_last, printing 12 MB to stdout and to stderr at every generation (third-party code left
verbose): the run directory keeps the head and the tail of it."""

import sys
from pathlib import Path

from diag.probe.cases import case

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "diag" / "cases"))
import append_last  # after sys.path names the built-in cases

LINE = "x" * 1023 + "\n"


@case("chatty", "append_last printing 12 MB to stdout and stderr at every generation")
def generate(gen):
    for _ in range(12 * 1024):
        sys.stdout.write(LINE)
        sys.stderr.write(LINE)
    append_last.generate(gen)
