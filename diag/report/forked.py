"""The run pages of a render made and written by a forked helper while the parent makes the other
pages: on a machine with two or more cores they take no wall time of their own (with reading and
writing them, they are a quarter of a render from scratch).

The helper is forked before the parent reads the history, so the two share only the imports: the
model the parent then builds and walks is never copied into it (after a later fork, every page of
it the parent touched would have been held twice). The helper waits for its task (the run ids and
what their pages share), which the parent sends once the site has claimed those pages
(``publish.Site.claim``). It renders the pages from its own connection to the DB (SQLite
connections must not cross a fork), writes each one into the site, and notes whether it did in an
unnamed temporary file that the parent reads once the helper has exited. Where a helper is not
asked for (``--processes 1``, or one core), not possible (not Linux, other threads, a DB held in
memory, no site to write in) or not worth it (a re-render by the same code, which makes a night's
pages; a few pages), or where it fails in any way, the parent renders the pages itself and
``publish`` writes them: the site is the same either way.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import tempfile
import threading
from typing import Any, Callable, Iterable, Optional

FORK_AT = 200  # run pages: below this many, the parent renders them itself

Work = Callable[[Any], Iterable[tuple[str, Any]]]


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def can_fork() -> bool:
    """On Linux, where this process runs no other Python thread: a child forked beside one may
    inherit a lock it held (logging's, a file's) and wait on it for ever. (numpy's BLAS threads,
    where numpy is imported, are not Python's; numpy prepares them for a fork.)"""
    return sys.platform.startswith("linux") and threading.active_count() == 1


def worth_forking(items: int) -> bool:
    return items >= FORK_AT


class Helper:
    """A forked child that waits for one task, runs ``work(task)`` and keeps the (key, value) pairs
    it yields. ``result()`` is those, as a dict, or None where no task was sent or the child failed (it raised,
    was killed or interrupted). As a context manager, the child is stopped and reaped however the
    block ends."""

    @staticmethod
    def when(fork: bool, work: Work) -> Helper | NoHelper:
        return Helper(work) if fork else NoHelper()

    def __init__(self, work: Work) -> None:
        self.output = tempfile.TemporaryFile()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the parent's code
            code = 1
            try:
                os.close(write)
                with os.fdopen(read, "rb") as tasks:
                    task = pickle.load(tasks)
                for item in work(task):
                    pickle.dump(item, self.output, protocol=pickle.HIGHEST_PROTOCOL)
                self.output.flush()
                code = 0
            except BaseException:  # no task, or a failed child: the parent does the work
                pass
            finally:
                os._exit(code)
        os.close(read)
        self.pid: Optional[int] = pid
        self.tasks: Optional[Any] = os.fdopen(write, "wb")
        self.sent = False

    def send(self, task: Any) -> None:
        """Hand the child its task; where it has gone meanwhile (killed), nothing is sent and the
        caller does the work itself."""
        if self.tasks is None:
            return
        try:
            pickle.dump(task, self.tasks, protocol=pickle.HIGHEST_PROTOCOL)
            self.tasks.close()
            self.sent = True
        except OSError:  # a broken pipe: the child is gone
            try:
                self.tasks.close()
            except OSError:
                pass
        self.tasks = None

    def result(self) -> Optional[dict[str, Any]]:
        if not self.sent or self.pid is None:
            return None
        status = os.waitpid(self.pid, 0)[1]
        self.pid = None
        if status != 0:
            return None
        found: dict[str, Any] = {}
        self.output.seek(0)
        try:
            while True:
                key, value = pickle.load(self.output)
                found[key] = value
        except EOFError:
            return found

    def __enter__(self) -> Helper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the child if it still runs (no task was sent, or the render failed or was
        interrupted), reap it and close the files."""
        if self.tasks is not None:
            self.tasks.close()  # the child reads no task, and exits
            self.tasks = None
        if self.pid is not None:
            if self.sent:
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            os.waitpid(self.pid, 0)
            self.pid = None
        self.output.close()


class NoHelper:
    """No child: ``result()`` is None, and the caller renders the pages itself."""

    def __enter__(self) -> NoHelper:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def send(self, task: Any) -> None:
        pass

    def result(self) -> None:
        return None
