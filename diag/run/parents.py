"""Long-lived probe parents: one import of torch per target environment, each run forked from it.

A matrix's runs in one environment each pay the import of torch and transformers (about 4.6 s
of CPU) when each is a process of its own. ``Parents`` starts, per environment that has more than
one run in the matrix, a probe parent (diag/probe/parent.py) that imports once and forks a child
per run; the child is what a probe process of its own would have been, in a session of its own,
so the orchestrator times it out, kills it and reads its exit exactly as before (spawn.watch).
A parent lives while its environment has runs left (with ``--repeat`` over several torch builds,
each build's parent therefore stays for the whole invocation).

Where no parent can be kept, a run is a process of its own, and its capabilities say why
(``probe_process``): no fork, ``DIAG_PROBE_PARENT=0``, a parent that failed to start or died, a
torch whose structured trace cannot be pointed at a run after import, or one run alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import IO, Optional

from diag.contract import LIFELINE_VARIABLE, oom_kills, record_types
from diag.run.spawn import ProcessTracker, watch

ALONE = "a process of its own"
FORKED = "forked from the environment's probe parent"
PER_RUN_VARIABLES = ("TORCH_TRACE", "TORCHINDUCTOR_CACHE_DIR", "TMPDIR", LIFELINE_VARIABLE)  # as probe/parent.py
SWITCH = "DIAG_PROBE_PARENT"  # 0: every run a process of its own
START_LIMIT_S = 300.0  # a parent's imports; a cold import of torch and transformers on a busy disk


class ParentGone(Exception):
    """The parent ended (or never started): the run goes to a process of its own."""


POLL_S = 0.5
# How long a parent may take to answer what it can answer at once (fork a run, reap one that ended)
# before it is taken as wedged (stopped by SIGSTOP, say), killed, and its runs read from /proc.
ANSWER_LIMIT_S = 10.0
SLOW_PARENT = 6  # times ANSWER_LIMIT_S, for a parent that is running, not stopped


def process_state(pid: int) -> Optional[tuple[str, Optional[int]]]:
    """``pid``'s state letter (R, S, T for stopped, Z for ended and not reaped, ...) and, once it
    ended, its exit code as ``subprocess`` gives one (negative: the signal), from /proc; None where
    no such process is (or no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    state = fields[0].decode()
    if state not in ("Z", "X") or len(fields) < 50:  # exit_code is the stat's 52nd field (Linux 3.5)
        return state, None
    status = int(fields[49])
    return state, -(status & 0x7F) if status & 0x7F else (status >> 8) & 0xFF


class ForkedRun:
    """A run a parent forked, as the tracker and spawn.watch see a Popen: its pid (the leader of
    its own session), and its exit code once the parent reaped it (negative: the signal).

    Its waits never depend on the parent alone: a run that ended and that its parent did not report
    within ANSWER_LIMIT_S (a stopped parent cannot) is read from /proc, and the parent is killed."""

    def __init__(self, parent: Optional[ProbeParent] = None) -> None:
        self._ended = threading.Event()
        self.forked = threading.Event()  # set once the parent says its pid, or ended without forking it
        self.pid = 0
        self.returncode: Optional[int] = None
        self._parent = parent
        self._seen_ended: Optional[float] = None  # when /proc first showed it ended, unreported
        self._exit_code: Optional[int] = None

    def ended(self, returncode: Optional[int]) -> None:
        if not self._ended.is_set():
            self.returncode = returncode
            self._ended.set()

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._ended.wait(POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic()))):
            self._look()
            if self._ended.is_set():
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"run {self.pid}", timeout or 0)
        return self.returncode

    def _look(self) -> None:
        """The run as /proc shows it: ended long enough ago that its parent should have said so, the
        parent is wedged, and the run's own exit code (or, gone without one, a kill) is taken."""
        if not self.pid:
            return
        state = process_state(self.pid)
        if state is not None and state[0] not in ("Z", "X"):
            return
        if state is not None and state[1] is not None:
            self._exit_code = state[1]
        now = time.monotonic()
        self._seen_ended = self._seen_ended or now
        # A parent that is not stopped is only slow (a busy machine) for longer: killing it would take
        # its other runs in flight with it (their lifelines), so it is given more time.
        limit = ANSWER_LIMIT_S if self._parent is None or self._parent.wedged() else ANSWER_LIMIT_S * SLOW_PARENT
        if now - self._seen_ended < limit:
            return
        code = self._exit_code if self._exit_code is not None else -9
        if self._parent is not None:
            self._parent.abandon(self, f"the probe parent did not report run {self.pid} that ended")
        self.ended(code)


class ProbeParent:
    """One parent process and the runs it forked; safe to share between worker threads."""

    def __init__(self, command: list[str], environ: dict[str, str], backends: list[str], serves: str = "") -> None:
        """``serves``: the matrix's run folder, on the parent's command line (and so its children's,
        which ps shows with the parent's arguments) to tell whose probes they are."""
        self.log: IO[bytes] = tempfile.TemporaryFile(prefix="diag-parent-")
        args = [arg for backend in sorted(set(backends)) for arg in ("--backend", backend)]
        args += ["--for", serves] if serves else []
        self.process = subprocess.Popen(
            [*command, "serve", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=_parents_environ(environ),
            start_new_session=True,
        )
        self._lock = threading.Lock()
        self._next_id = 0
        self._forking: dict[int, ForkedRun] = {}  # request id -> run not yet forked
        self._live: dict[int, ForkedRun] = {}  # pid -> run not yet reaped
        self._ready = threading.Event()
        self.refused: Optional[str] = None
        self.gone: Optional[str] = None
        self.pid: Optional[int] = None
        self._reader = threading.Thread(target=self._read, name="diag-parent-reader", daemon=True)
        self._reader.start()

    def wait_ready(self, timeout_s: float = START_LIMIT_S) -> Optional[str]:
        """None once the parent has imported and can fork runs; else why not (and it is stopped)."""
        if not self._ready.wait(timeout_s):
            self.close()
            return f"the probe parent did not start within {timeout_s:.0f} s"
        reason = self.refused or self.gone
        if reason is not None:
            self.close()
        return reason

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if "ready" in message:
                self.refused = None if message["ready"] else str(message.get("why") or "refused")
                self.pid = message.get("pid")
                self._ready.set()
            elif "id" in message:
                with self._lock:
                    run = self._forking.pop(message["id"], None)
                    if run is not None:
                        run.pid = message["pid"]
                        self._live[run.pid] = run
                if run is not None:
                    run.forked.set()
            elif "pid" in message:
                with self._lock:
                    run = self._live.pop(message["pid"], None)
                if run is not None:
                    run.ended(message.get("returncode"))
        self._ended()

    def _ended(self) -> None:
        """The parent's output closed: it exited or was killed, and its children with it."""
        self.gone = self.gone or f"the probe parent ended ({self._stderr_tail() or 'no message'})"
        self._ready.set()
        with self._lock:
            waiting, self._forking = list(self._forking.values()), {}
            live, self._live = list(self._live.values()), {}
        for run in waiting:
            run.forked.set()
        for run in live:
            run.ended(-9)  # the lifeline killed it with the parent

    def _stderr_tail(self) -> str:
        try:
            self.log.seek(0)
            lines = self.log.read().decode(errors="replace").strip().splitlines()
        except (OSError, ValueError):
            return ""
        return lines[-1][:300] if lines else ""

    def wedged(self) -> bool:
        """The parent is stopped (SIGSTOP, a debugger): it can neither fork nor reap."""
        state = process_state(self.process.pid)
        return state is not None and state[0] in ("T", "t")

    def abandon(self, run: ForkedRun, why: str) -> None:
        """The parent failed to answer for ``run``: it is killed (its other runs live on in sessions
        of their own, each read from /proc by its own wait) and later runs go to processes of their own."""
        with self._lock:
            self._live.pop(run.pid, None)
            self.gone = self.gone or f"{why} (stopped or wedged: killed)"
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def fork(self, request: record_types.ForkRequest) -> ForkedRun:
        """Ask for one run; the run once the parent has forked it. ParentGone where it cannot."""
        run = ForkedRun(self)
        with self._lock:
            if self.gone:
                raise ParentGone(self.gone)
            self._next_id += 1
            self._forking[self._next_id] = run
            line = json.dumps({**request, "id": self._next_id}) + "\n"
            try:
                assert self.process.stdin is not None
                self.process.stdin.write(line.encode())
                self.process.stdin.flush()
            except (OSError, ValueError) as exc:
                self._forking.pop(self._next_id, None)
                raise ParentGone(f"the probe parent stopped reading ({exc})") from exc
        waited = 0.0
        while not run.forked.wait(POLL_S):
            waited = waited + POLL_S if self.wedged() else 0.0
            if waited >= ANSWER_LIMIT_S:
                self.abandon(run, "the probe parent did not fork a run")
                raise ParentGone(self.gone or "the probe parent stopped")
        if not run.pid:
            raise ParentGone(self.gone or "the probe parent ended")
        return run

    def close(self) -> None:
        """Close its input: the parent kills whatever it still has running and exits."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=5)
        self.log.close()


def _parents_environ(environ: dict[str, str]) -> dict[str, str]:
    """A run's environment less what differs from run to run; the temporary folder is diag's own."""
    found = {k: v for k, v in environ.items() if k not in PER_RUN_VARIABLES}
    if "TMPDIR" in os.environ:
        found["TMPDIR"] = os.environ["TMPDIR"]
    return found


def _key(command: list[str], environ: dict[str, str]) -> tuple:
    return tuple(command), tuple(sorted((k, v) for k, v in environ.items() if k not in PER_RUN_VARIABLES))


class Parents:
    """The parents of one matrix: started on an environment's first run, closed after its last."""

    def __init__(self, planned: list[tuple[list[str], dict[str, str], str]], serves: str = "") -> None:
        """``planned``: per run of the matrix, its probe command, environment and backend; ``serves``:
        the matrix's run folder (ProbeParent)."""
        self._serves = serves
        self._left = Counter(_key(command, environ) for command, environ, _ in planned)
        self._backends: dict[tuple, list[str]] = {}
        for command, environ, backend in planned:
            self._backends.setdefault(_key(command, environ), []).append(backend)
        self._parents: dict[tuple, ProbeParent] = {}
        self._refused: dict[tuple, str] = {}
        self._lock = threading.Lock()

    def lease(self, command: list[str], environ: dict[str, str]) -> tuple[Optional[ProbeParent], str]:
        """The environment's parent, started if need be; else None and why the run is a process of its own."""
        if os.environ.get(SWITCH) == "0":
            return None, f"{ALONE} ({SWITCH}=0)"
        if not hasattr(os, "fork"):
            return None, f"{ALONE} (this platform has no fork)"
        key = _key(command, environ)
        with self._lock:
            if key in self._refused:
                return None, f"{ALONE} ({self._refused[key]})"
            if self._left[key] < 2 and key not in self._parents:
                return None, f"{ALONE} (one run in its environment)"
            parent = self._parents.get(key)
            if parent is None:
                try:
                    parent = ProbeParent(
                        command, environ, [b for b in self._backends[key] if b in COMPILERS], self._serves
                    )
                except OSError as exc:  # the interpreter cannot be started: each run says so itself
                    self._refused[key] = f"the probe parent could not start: {exc}"
                    return None, f"{ALONE} ({self._refused[key]})"
                why = parent.wait_ready()
                if why is not None:
                    self._refused[key] = why
                    return None, f"{ALONE} ({why})"
                self._parents[key] = parent
        return parent, f"{FORKED} (pid {parent.pid})"

    def done(self, command: list[str], environ: dict[str, str]) -> None:
        """One run of the environment finished: its parent closes after its last."""
        key = _key(command, environ)
        with self._lock:
            self._left[key] -= 1
            parent = self._parents.pop(key, None) if self._left[key] <= 0 else None
        if parent is not None:
            parent.close()

    def close(self) -> None:
        with self._lock:
            parents, self._parents = list(self._parents.values()), {}
        for parent in parents:
            parent.close()


COMPILERS = ("inductor", "aot_eager")  # the backends whose compiler a parent imports (supervise.BACKEND_MODULES)


def run_forked(
    parent: ProbeParent,
    probe_args: record_types.ForkRequest,
    log_dir: Path,
    env: dict[str, str],
    timeout_s: float,
    label: str,
    tracker: Optional[ProcessTracker] = None,
) -> record_types.ExitRecord:
    """spawn.run_probe's counterpart: the run forked by ``parent`` instead of started here; the
    fields of its ``exit`` record. ParentGone where the parent could not fork it."""
    log_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    oom_before = oom_kills()
    request: record_types.ForkRequest = {
        **probe_args,
        "env": env,
        "stdout": str(log_dir / f"{label}.stdout.txt"),
        "stderr": str(log_dir / f"{label}.stderr.txt"),
    }
    run = parent.fork(request)
    return watch(run, timeout_s, label, start, oom_before, tracker)
