"""What torch showed while the timing pass compiled (``CompileNotices``), with its logging left as it is.

Imports: standard library; torch through ``capture`` and ``compat``.
"""

from __future__ import annotations

import logging

from diag.probe import capture, compat


class CompileNotices(logging.Handler):
    """What torch showed while the timing pass compiled: records at the levels torch lets through
    by default (WARNING and up) and any record carrying an exception. torch's levels are left as
    they are and nothing is formatted, so the timing pays nothing for it.

    The diagnosis pass reuses the timing pass's compiled graphs only where this saw nothing (and the
    timing pass lowered every graph itself): then no warning or error inside AOTAutograd or inductor
    can be lost by not lowering again (see diagnose.reuse_decision).
    """

    LIMIT = 20

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.seen: list[dict] = []
        self.count = 0
        self._loggers: list[logging.Logger] = []

    def emit(self, log_record: logging.LogRecord) -> None:
        if log_record.levelno < logging.WARNING and not log_record.exc_info:
            return
        self.count += 1
        if len(self.seen) < self.LIMIT:
            exc = log_record.exc_info[1] if log_record.exc_info else None
            self.seen.append(
                {
                    "logger": log_record.name,
                    "level": log_record.levelname,
                    "exception": type(exc).__name__ if exc is not None else None,
                }
            )

    def noted(self) -> list[dict]:
        """What was seen, as the timing record keeps it: the first LIMIT, then how many more."""
        more = self.count - len(self.seen)
        return self.seen + ([{"more": more}] if more > 0 else [])

    def install(self) -> None:
        try:
            self._loggers = capture.capture_points(legacy=not compat.debug_logs()[0])
        except Exception:  # a view on the timing pass: it never stops the compile
            self._loggers = [logging.getLogger("torch")]
        for logger in self._loggers:
            logger.addHandler(self)

    def uninstall(self) -> None:
        for logger in self._loggers:
            logger.removeHandler(self)
        self._loggers = []
