"""Run one probe process: own process group, timeout, killed on any exception in the parent.

Nothing comes back from the process but its exit: what it found is in the files it
wrote (diag/run/rundir.py reads them). Its stdout and stderr go to files in the run
directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Optional, Protocol

from diag.contract import LIFELINE_VARIABLE, oom_kills, oom_kills_since, record_types


class ProcessTracker:
    """The probes in flight, so that one thread can kill what other threads started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: set[Process] = set()
        self.stopped = False

    def add(self, process: Process) -> None:
        with self._lock:
            self._live.add(process)
            if self.stopped:
                kill_group(process)

    def discard(self, process: Process) -> None:
        with self._lock:
            self._live.discard(process)

    def kill_all(self) -> None:
        with self._lock:
            self.stopped = True
            live = list(self._live)
        for process in live:
            kill_group(process)


def kill_group(process: Process, wait: bool = True) -> None:
    """SIGKILL the process's whole group (the probe, its passes, inductor's compile workers)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if wait:
        process.wait()


class Process(Protocol):
    """What the tracker kills and waits on: a probe started here (Popen), or one a probe parent
    forked (parents.ForkedRun)."""

    pid: int
    returncode: Optional[int]

    def wait(self, timeout: Optional[float] = None) -> Optional[int]: ...


def run_probe(
    command: list[str],
    log_dir: Path,
    env: dict[str, str],
    timeout_s: float,
    label: str,
    tracker: Optional[ProcessTracker] = None,
) -> record_types.ExitRecord:
    """Run ``command`` (a probe invocation); never leaves the child or its workers behind.

    Returns the fields of an ``exit`` record (records.py) for it.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    oom_before = oom_kills()
    # The lifeline: this process holds the write end; the probe reads the other and kills its whole
    # group at EOF, which the kernel delivers when this process dies, even by SIGKILL.
    lifeline, held = os.pipe()
    try:
        with open(log_dir / f"{label}.stdout.txt", "wb") as out, open(log_dir / f"{label}.stderr.txt", "wb") as err:
            try:
                process = subprocess.Popen(
                    command,
                    stdout=out,
                    stderr=err,
                    stdin=subprocess.DEVNULL,
                    env={**env, LIFELINE_VARIABLE: str(lifeline)},
                    pass_fds=(lifeline,),
                    start_new_session=True,
                )
            finally:
                os.close(lifeline)
        return watch(process, timeout_s, label, start, oom_before, tracker)
    finally:
        os.close(held)


def watch(
    process: Process,
    timeout_s: float,
    label: str,
    start: float,
    oom_before: Optional[int],
    tracker: Optional[ProcessTracker] = None,
) -> record_types.ExitRecord:
    """Wait for a started probe (its own session) to end, killing its session at ``timeout_s`` or
    on any exception here; the fields of its ``exit`` record."""
    tracker = tracker or ProcessTracker()
    tracker.add(process)
    timed_out = False
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(process)
    except BaseException:
        kill_group(process)
        raise
    else:
        # Inductor's compile workers share the group; none may outlive the probe.
        kill_group(process, wait=False)
    finally:
        tracker.discard(process)
    code = process.returncode
    return {
        "name": label,
        "returncode": None if timed_out else code,
        "signal": -code if code is not None and code < 0 and not timed_out else None,
        "timed_out": timed_out,
        "duration_s": time.monotonic() - start,
        "oom_kills": oom_kills_since(oom_before),
    }
