"""One import per environment: a long-lived probe parent that forks each run.

    python -m diag.probe serve [--backend inductor ...]

Importing torch and transformers costs about 4.6 s of CPU, more than most of the runs of an
``hf:all`` matrix compile. This process imports them once, compiles nothing, and forks a child
for each run it is asked for; the child is what ``python -m diag.probe run`` would have been
(supervise.main: its passes forked from it in turn), in a session of its own, with the run's
environment, its output in the run directory, and its own lifeline. Every run therefore starts
from a process that has imported torch and done nothing else: what a run changes (dynamo's
config, torch.backends, threads it leaves, memory it holds) dies with it.

The orchestrator (diag/run/parents.py) talks to this process in lines of JSON: on stdout
``{"ready": true}`` once the imports are done (or ``{"ready": false, "why": ...}`` where runs
cannot be forked from it, and it exits); on stdin one request per run, ``{"id", "spec", "dir",
"timeout", "timing", "env", "stdout", "stderr"}``, answered by ``{"id", "pid"}`` once forked and
``{"pid", "returncode"}`` (negative: the signal) once reaped. At EOF on stdin (the orchestrator
closed it, or died) every child's session is killed and this process exits.

Imports: standard library; torch, transformers and the backends' compilers (supervise.preload).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Optional

from diag.probe.record_types import ForkRequest
from diag.probe.spec import LIFELINE_VARIABLE

# Variables that differ from run to run: the parent is started without them, and each child reads
# them after the fork (see ``_runs_environment``); every other variable the parent was started with.
PER_RUN_VARIABLES = ("TORCH_TRACE", "TORCHINDUCTOR_CACHE_DIR", "TMPDIR", LIFELINE_VARIABLE)


def trace_handlers() -> Optional[list[Any]]:
    """torch's structured-trace handlers, which read TORCH_TRACE at import: [] on a torch without a
    trace log (before 2.3); None where the log has a handler whose folder cannot be set after import."""
    try:
        from torch._logging import _internal
    except ImportError:
        return []
    trace_log = getattr(_internal, "trace_log", None)
    if trace_log is None:
        return []
    handlers = list(trace_log.handlers)
    if any(not hasattr(handler, "root_dir") or getattr(handler, "stream", None) is not None for handler in handlers):
        return None
    return handlers


def refusal() -> Optional[str]:
    """Why runs cannot be forked from this process, or None."""
    if not hasattr(os, "fork") or not hasattr(os, "setsid"):
        return "this platform has no fork"
    if trace_handlers() is None:
        return "this torch's structured-trace handler cannot be pointed at a run's folder after import"
    return None


def _runs_environment(env: dict[str, str]) -> None:
    """In the child: the run's environment in place of the parent's, and what torch read from it at
    import pointed at this run (the trace folder; inductor's cache folder where a torch kept it)."""
    os.environ.clear()
    os.environ.update(env)
    for handler in trace_handlers() or []:
        handler.root_dir = env.get("TORCH_TRACE")
    for module_name in ("torch._inductor.codecache", "torch._inductor.runtime.cache_dir_utils"):
        module = sys.modules.get(module_name)
        cached = getattr(getattr(module, "cache_dir", None), "cache_clear", None)
        if cached is not None:
            cached()  # torch 2.1 and 2.2 kept the folder in an lru_cache
    tempfile.tempdir = None  # read again from the run's TMPDIR, which holds inductor's default folder
    headers_in_run_folder()


def headers_in_run_folder() -> None:
    """Inductor keeps its precompiled C++ headers (about 150 MB, built by the first CPU compile) under
    its default folder in $TMPDIR, fixed when its codecache is imported, and no fresh cache resets
    them. A run's $TMPDIR is its own (runner.probe_environ), so where the parent imported inductor
    with another, the folder is pointed at the run's: every run's cold compile builds them."""
    codecache: Any = sys.modules.get("torch._inductor.codecache")
    default_dir = getattr(codecache, "default_cache_dir", None)
    if codecache is None or default_dir is None or not hasattr(codecache, "_HEADER_DIR"):
        return  # a torch without precompiled headers (before 2.6), or inductor not imported here
    codecache._HEADER_DIR = os.path.join(default_dir(), "precompiled_headers")
    if hasattr(codecache, "_HEADER_LOCK_DIR"):
        codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")


def _child(request: ForkRequest, lifeline: int, keep_closed: list[int]) -> None:
    """In the forked child: become what ``python -m diag.probe run`` is, run, exit. Never returns."""
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        for each in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(each, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in keep_closed:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        _runs_environment({**request["env"], LIFELINE_VARIABLE: str(lifeline)})
        from diag.probe import supervise

        sys.argv = [str(Path(supervise.__file__).with_name("__main__.py")), "run", "--spec", request["spec"]]
        code = supervise.main(request["spec"], Path(request["dir"]), float(request["timeout"]), bool(request["timing"]))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


class Server:
    """The parent's loop: requests in, children forked, exits reported; nothing else."""

    def __init__(self, answers: int) -> None:
        self.answers = answers  # the fd the orchestrator reads
        self.lifelines: dict[int, int] = {}  # child pid -> the write end of its lifeline, held here
        self.pending = b""
        self.wakeup: list[int] = []  # the SIGCHLD wakeup pipe's two ends

    def say(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message) + "\n").encode()
        while data:
            data = data[os.write(self.answers, data) :]

    def fork(self, request: ForkRequest) -> None:
        held_by_child, held_here = os.pipe()
        keep_closed = [self.answers, *self.wakeup, held_here, *self.lifelines.values()]
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, held_by_child, keep_closed)
        os.close(held_by_child)
        self.lifelines[pid] = held_here
        self.say({"id": request["id"], "pid": pid})

    def reap(self) -> None:
        while self.lifelines:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.lifelines:
                os.close(self.lifelines.pop(pid))
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                self.say({"pid": pid, "returncode": code})

    def requests(self, data: bytes) -> list[ForkRequest]:
        self.pending += data
        *lines, self.pending = self.pending.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def stop(self) -> None:
        """Every child's session killed and reaped: nothing forked here outlives the parent."""
        for pid in list(self.lifelines):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in list(self.lifelines):
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            os.close(self.lifelines.pop(pid))


def serve(backends: list[str]) -> int:
    """Import, say whether runs can be forked from here, then fork them until stdin closes."""
    from diag.probe import supervise

    # The protocol has fd 1 to itself: nothing torch prints may land in it.
    answers = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    server = Server(answers)
    preloaded: list[Optional[str]] = [*backends] or [None]
    for backend in preloaded:
        supervise.preload(backend)
    why = refusal()
    if why is not None:
        server.say({"ready": False, "why": why})
        return 0
    wakeup_read, wakeup_write = server.wakeup = list(os.pipe())
    os.set_blocking(wakeup_write, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(wakeup_write)
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ, "requests")
    selector.register(wakeup_read, selectors.EVENT_READ, "children")
    server.say({"ready": True, "pid": os.getpid()})
    try:
        while True:
            for key, _ in selector.select():
                if key.data == "children":
                    os.read(wakeup_read, 4096)
                    server.reap()
                    continue
                data = os.read(0, 1 << 16)
                if not data:
                    return 0
                for request in server.requests(data):
                    server.fork(request)
                server.reap()  # a child that ended before its SIGCHLD handler could be installed
    finally:
        server.stop()
