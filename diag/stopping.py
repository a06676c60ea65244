"""How a command stops: one handler for every signal that ends it.

SIGTERM (what CI runners, Slurm and Kubernetes send first) and SIGHUP (a closed terminal) are
turned into the same exception as Ctrl-C, so that every command cleans up on all three alike: a
matrix kills its probes and keeps the runs it finished, temporary folders and a half-built
environment are removed. The exit status is 128 + the signal's number, as a shell reports it.
A signal the caller ignores (``nohup``, a background job's SIGINT) stays ignored.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Any, Iterator, Optional

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """A stop signal arrived; handled wherever Ctrl-C is."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def by(self) -> str:
        """`` by SIGTERM`` (nothing for Ctrl-C, which says enough)."""
        return "" if self.signum == signal.SIGINT else f" by {signal.Signals(self.signum).name}"


def of(exc: BaseException) -> Stopped:
    """The stop ``exc`` stands for: a plain KeyboardInterrupt is Ctrl-C."""
    return exc if isinstance(exc, Stopped) else Stopped(signal.SIGINT)


def within(exc: BaseException) -> Optional[Stopped]:
    """The stop behind ``exc``, where Python wrapped it in another error: a signal that lands while a
    class is made raises RuntimeError("Error calling __set_name__ ...") from it. None where none is."""
    seen: set[int] = set()
    found: Optional[BaseException] = exc
    while found is not None and id(found) not in seen:
        if isinstance(found, Stopped):
            return found
        seen.add(id(found))
        found = found.__cause__ or found.__context__
    return None


def _stop(signum: int, frame: Any) -> None:
    for each in SIGNALS:  # a second signal must not break the clean-up the first one started
        if signal.getsignal(each) is _stop:
            signal.signal(each, signal.SIG_IGN)
    raise Stopped(signum)


@contextlib.contextmanager
def on_stop_signals() -> Iterator[None]:
    """While inside: each stop signal the process does not ignore raises ``Stopped`` in the main thread."""
    previous = {}
    for each in SIGNALS:
        current = signal.getsignal(each)
        if current in (signal.SIG_DFL, signal.default_int_handler):
            previous[each] = signal.signal(each, _stop)
    try:
        yield
    finally:
        for each, handler in previous.items():
            if signal.getsignal(each) is not _ended:  # a hold outlives the block
                signal.signal(each, handler)


def _ended(signum: int, frame: Any) -> None:
    """A stop signal after the command ended: received and let go."""


def hold() -> None:
    """From now on a stop signal is received and let go: once a command has ended, its outcome is what
    the process reports, not a signal that came while it was exiting. A handler, not a blocked mask or
    SIG_IGN, which a process started from this one would inherit and be deaf to the signal."""
    for each in SIGNALS:
        if signal.getsignal(each) in (_stop, signal.SIG_DFL, signal.default_int_handler):
            signal.signal(each, _ended)


def saved() -> dict[int, Any]:
    """The stop signals' handlers now, for a caller that runs a command in its own process and goes on
    (the tests): ``restore`` puts them back."""
    return {each: signal.getsignal(each) for each in SIGNALS}


def restore(handlers: dict[int, Any]) -> None:
    for each, handler in handlers.items():
        signal.signal(each, handler)
