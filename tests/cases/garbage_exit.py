"""Prints junk and exits with status 3 in the compiled pass, before any verdict is written."""

import os
import sys

from diag.probe.cases import case

from _greedy import full_forward, greedy


@case("garbage_exit", "writes junk to stdout and stderr, then exits 3 without a verdict")
def generate(gen):
    if gen.compile(full_forward) is not full_forward:
        sys.stdout.write("\x00\xff{not json\n")
        sys.stderr.write("garbage_exit: leaving without a verdict\n")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(3)
    greedy(gen, full_forward)
