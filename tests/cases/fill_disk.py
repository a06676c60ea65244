"""Fills the file system of DIAG_FILL_PATH while it runs, as another program could: the run's own
results may still fit, the final save of the run into the DB on that disk does not."""

import os

from diag.probe.cases import case

from _greedy import full_forward, greedy


@case("fill_disk", "greedy decoding that fills the disk under DIAG_FILL_PATH first")
def generate(gen):
    path = os.environ.get("DIAG_FILL_PATH")
    if path:
        with open(path, "ab") as filler:
            try:
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
            except OSError:
                pass
    greedy(gen, full_forward)
