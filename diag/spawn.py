"""Run one probe process: own process group, timeout, killed on any exception in the parent.

Results come back only through the results file the probe writes; stdout and
stderr go to files in the run's artifact directory and only the stderr tail is
read back.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

STDERR_TAIL_BYTES = 4000


@dataclass
class ProbeOutcome:
    returncode: Optional[int]
    signal: Optional[int]
    timed_out: bool
    duration_s: float
    stderr_tail: str
    records: list[dict[str, Any]] = field(default_factory=list)
    unreadable_lines: int = 0

    def first(self, kind: str) -> Optional[dict[str, Any]]:
        return next((r for r in self.records if r.get("kind") == kind), None)

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("kind") == kind]


def read_results(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Records of a JSON-lines file; lines that do not parse (a torn last write, garbage) are counted."""
    records, bad = [], 0
    if not path.exists():
        return records, bad
    with open(path, "rb") as handle:
        for raw in handle:
            try:
                record = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                bad += 1
                continue
            if isinstance(record, dict) and "kind" in record:
                records.append(record)
            else:
                bad += 1
    return records, bad


def tail(path: Path, size: int = STDERR_TAIL_BYTES) -> str:
    if not path.exists():
        return ""
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - size))
        return handle.read().decode("utf-8", "replace")


class ProcessTracker:
    """The probes in flight, so that one thread can kill what other threads started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: set[subprocess.Popen] = set()
        self.stopped = False

    def add(self, process: subprocess.Popen) -> None:
        with self._lock:
            self._live.add(process)
            if self.stopped:
                _kill_group(process)

    def discard(self, process: subprocess.Popen) -> None:
        with self._lock:
            self._live.discard(process)

    def kill_all(self) -> None:
        with self._lock:
            self.stopped = True
            live = list(self._live)
        for process in live:
            _kill_group(process)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def run_probe(command: list[str], results_path: Path, log_dir: Path, env: dict[str, str],
              timeout_s: float, label: str, tracker: Optional[ProcessTracker] = None) -> ProbeOutcome:
    """Run ``command`` (a probe invocation); never leaves the child or its workers behind."""
    tracker = tracker or ProcessTracker()
    log_dir.mkdir(parents=True, exist_ok=True)
    stderr_path = log_dir / f"{label}.stderr.txt"
    start = time.monotonic()
    with open(log_dir / f"{label}.stdout.txt", "wb") as out, open(stderr_path, "wb") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                   env=env, start_new_session=True)
        tracker.add(process)
        timed_out = False
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(process)
        except BaseException:
            _kill_group(process)
            raise
        else:
            # Inductor's compile workers share the group; none may outlive the probe.
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        finally:
            tracker.discard(process)
    records, bad = read_results(results_path)
    code = process.returncode
    return ProbeOutcome(
        returncode=code,
        signal=-code if code is not None and code < 0 and not timed_out else None,
        timed_out=timed_out,
        duration_s=time.monotonic() - start,
        stderr_tail=tail(stderr_path),
        records=records,
        unreadable_lines=bad,
    )
