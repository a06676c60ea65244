"""Stops (SIGSTOP) the probe parent its run was forked from, once per folder, then generates as
append_last does: the run passes, and the parent can neither report it nor fork the next."""

import os
import signal
from pathlib import Path

from diag.probe.cases import case

from _greedy import full_forward, greedy


def _probe_parent() -> int:
    """The probe parent (``python -m diag.probe serve``): the topmost ancestor with its command line
    (the run it forked shows the same one); 0 where none is."""
    pid, found = os.getppid(), 0
    while pid > 1:
        try:
            if b"serve" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                found = pid
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
    return found


@case("stops_parent", "stops its probe parent once, then generates")
def generate(gen):
    marker = Path(os.environ.get("DIAG_TEST_STOP_MARKER", "stopped-parent"))
    parent = _probe_parent()
    if parent and not marker.exists():
        marker.write_text(str(parent))
        os.kill(parent, signal.SIGSTOP)
    greedy(gen, gen.compile(full_forward))
