"""Collectors that watch a compile: torch's own loggers at DEBUG, and dynamo's counters.

torch's loggers do not propagate to the root logger, so the handler is attached
to every torch logger that stops propagation. Each record is written to the
run's debug log and handed to the parsers (``parsers.py``), which turn graph-break,
recompile and swallowed-error records into findings. ``install`` and
``uninstall`` always leave torch's logging as they found it.

Imports: standard library and torch.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Optional, TextIO

from diag.probe import compat, counters
from diag.probe.parsers import ARG_MISMATCH, RECOMPILE_LIMIT, Finding, LoggedException, Record
from diag.probe.sites import AT_INSTRUCTION, PARSERS, traced_user_line


class LogCapture(logging.Handler):
    """Captures torch's dynamo/aot/inductor logs at DEBUG for one compile.

    Torch's own stderr handlers are detached while installed, so the probe's
    stderr keeps only what explains a crash; the full log goes to ``log_path``.
    """

    def __init__(self, log_path: Path, current_step: Callable[[], Optional[int]]) -> None:
        super().__init__(logging.DEBUG)
        self.log_path = log_path
        self.current_step = current_step
        self.findings: list[Finding] = []
        self._traced: Optional[str] = None  # the user's line dynamo traced last (sites.traced_user_line)
        self.parser_errors: list[str] = []
        self.record_count = 0
        self._file: Optional[TextIO] = None
        self._saved: list[tuple[logging.Logger, int, list[logging.Handler]]] = []
        # torch without set_logs (2.0): levels set by hand, and what they were
        self._legacy = False
        self._legacy_levels: dict[str, int] = {}
        self._legacy_config: Optional[int] = None
        self._legacy_init: Optional[tuple] = None  # (torch._dynamo.logging, its own init_logging)
        # What a case did to torch's logging while the capture was on, and whether diag's capture
        # lost records by it: (nothing lost, what happened). A case may call set_logs, or set a
        # logger's level: the capture turns itself on again and says so (notes), never counts zeros.
        self.interference: list[tuple[bool, str]] = []
        self._set_logs: Optional[Callable] = None  # torch's own set_logs, while a guard stands in for it
        self._held_disable: Optional[int] = None  # the level a case passed to logging.disable, held back
        self._guarded: list[tuple[object, str, Callable]] = []  # (module, attribute, original) of each guard
        self._levels: list[tuple[logging.Logger, int]] = []  # each capture point's level as diag left it
        self._guard_failures: Optional[Callable[[], None]] = None  # stops the watch of torch 2.0's guard failures
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))

    def install(self) -> None:
        """Turn torch's compile logs to DEBUG and attach; on a torch without ``torch._logging``
        (2.0) through dynamo's own ``config.log_level``. Never raises: a collector that cannot
        attach is a parser error, and the compile goes on."""
        if self._file is not None:
            return
        try:
            self._file = open(self.log_path, "w", encoding="utf-8", errors="backslashreplace")
        except OSError as exc:
            self.parser_errors.append(f"debug log {self.log_path}: cannot open: {exc}")
        try:
            self._turn_on()
            if not self._legacy:
                self._guard_set_logs()
            self._guard_disable()
            self._watch_guard_failures()
        except Exception as exc:
            self.parser_errors.append(f"log capture: turning torch's logs on failed: {type(exc).__name__}: {exc}")
        self._attach()

    def _watch_guard_failures(self) -> None:
        """On torch 2.0, each guard failure logged as a recompile record as it happens (counters.py)."""
        self._guard_failures = counters.watch_guard_failures(self._guard_failed)

    def _guard_failed(self, code: Any, reason: object) -> None:
        self.emit(counters.guard_failure_record(code, reason))

    def _attach(self) -> None:
        """This handler on every capture point, torch's stderr handlers off (what they were is saved once)."""
        saved = {id(logger) for logger, _, _ in self._saved}
        for logger in capture_points(self._legacy):
            if id(logger) not in saved:
                self._saved.append((logger, logger.level, list(logger.handlers)))
            for handler in list(logger.handlers):
                if _writes_to_stream(handler):
                    logger.removeHandler(handler)
            if self not in logger.handlers:
                logger.addHandler(self)
            logger.disabled = False
        manager: Any = logging.root.manager  # _clear_cache: the logging module's own, untyped
        if manager.disable:  # set without logging.disable (its guard holds a call back)
            manager.disable = logging.NOTSET
            manager._clear_cache()
        self._levels = [(logger, logger.level) for logger in capture_points(self._legacy)]

    def _guard_set_logs(self) -> None:
        """Stand in for ``torch._logging.set_logs`` (under both names a case may call it by): the
        case's call goes through, then diag's levels and handler are put back at once."""
        import torch._logging

        torch_logging: Any = torch._logging  # set_logs's keywords differ from one torch to the next
        original = torch_logging.set_logs
        self._set_logs = original

        @functools.wraps(original)  # its signature is original's: compat reads which keywords it takes
        def set_logs(*args: object, **kwargs: object) -> None:
            original(*args, **kwargs)
            said = ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])
            self.interference.append(
                (True, f"the case called torch._logging.set_logs({said[:300]}); diag turned its capture on again")
            )
            self._turn_on()
            self._attach()

        for module in (torch_logging, getattr(torch_logging, "_internal", None)):
            if module is not None and getattr(module, "set_logs", None) is original:
                module.set_logs = set_logs
                self._guarded.append((module, "set_logs", original))

    def _guard_disable(self) -> None:
        """Stand in for ``logging.disable``, which silences every logger, torch's too (no record is even
        made): the level asked for is held back while the capture is on, said, and applied after it."""

        @functools.wraps(logging.disable)
        def disable(level: int = logging.CRITICAL) -> None:
            self._held_disable = level
            said = f"the case called logging.disable({logging.getLevelName(level)}); diag held it back while it"
            self.interference.append((True, f"{said} captured torch's logs (the case's own loggers logged meanwhile)"))

        self._guarded.append((logging, "disable", logging.disable))
        logging.disable = disable

    def keep(self) -> None:
        """At a decode step's boundary: where the case changed a level or a handler of torch's loggers
        by other means than set_logs, turn the capture on again and say that records were lost."""
        if self._file is None or self._legacy:
            return
        changed = sorted(
            {
                logger.name
                for logger, level in self._levels
                if logger.level != level or self not in logger.handlers or logger.disabled
            }
            | ({"logging.root.manager.disable"} if logging.root.manager.disable else set())
        )
        if not changed:
            return
        step = self.current_step()
        self.interference.append(
            (
                False,
                f"the case changed torch's loggers ({', '.join(changed[:5])}{' ...' if len(changed) > 5 else ''}) "
                f"during the run; diag turned its capture on again at decode step {step}, and what was logged "
                "in between is missing: counts from the log may be low",
            )
        )
        self._turn_on()
        self._attach()

    def _turn_on(self) -> None:
        if compat.debug_logs()[0]:
            import torch._logging

            (self._set_logs or torch._logging.set_logs)(
                **compat.log_keywords(
                    {
                        "dynamo": logging.DEBUG,
                        "aot": logging.DEBUG,
                        "inductor": logging.DEBUG,
                        "graph_breaks": True,
                        "recompiles": True,
                        "recompiles_verbose": True,
                    }
                )
            )
            compat.quiet_artifacts()
            return
        self._legacy = True
        self._legacy_levels = {name: logging.getLogger(name).level for name in LEGACY_LOGGERS}
        import torch._dynamo.config as dynamo_config

        # torch 2.0 re-runs logging.config.dictConfig at every torch.compile (convert_frame's
        # init_logging), which replaces the handlers on its loggers: attach again after it.
        dynamo_logging: Any
        try:
            import torch._dynamo.logging as dynamo_logging
        except ImportError:
            dynamo_logging = None
        original = getattr(dynamo_logging, "init_logging", None)
        if original is not None:

            def init_logging(*args, **kwargs):
                original(*args, **kwargs)
                self._attach()

            dynamo_logging.init_logging = init_logging
            self._legacy_init = (dynamo_logging, original)

        legacy_config: Any = dynamo_config  # log_level: torch 2.0's alone
        if hasattr(legacy_config, "log_level"):
            self._legacy_config = legacy_config.log_level
            legacy_config.log_level = logging.DEBUG  # 2.0: a property that sets its loggers' levels
        for name in LEGACY_LOGGERS:
            logging.getLogger(name).setLevel(logging.DEBUG)

    def _turn_off(self) -> None:
        if not self._legacy:
            if compat.debug_logs()[0]:
                import torch._logging

                (self._set_logs or torch._logging.set_logs)()
            return
        import torch._dynamo.config

        dynamo_config: Any = torch._dynamo.config  # log_level: torch 2.0's alone
        if self._legacy_init is not None:
            module, original = self._legacy_init
            module.init_logging = original
            self._legacy_init = None
        if self._legacy_config is not None:
            dynamo_config.log_level = self._legacy_config
        for name, level in self._legacy_levels.items():
            logging.getLogger(name).setLevel(level)

    def uninstall(self) -> None:
        if self._guard_failures is not None:
            self._guard_failures()  # stop reporting, torch's own list factory back
            self._guard_failures = None
        for module, name, original in self._guarded:
            setattr(module, name, original)
        self._guarded.clear()
        if self._held_disable is not None:
            logging.disable(self._held_disable)
        for logger, level, handlers in self._saved:
            logger.removeHandler(self)
            logger.setLevel(level)
            for handler in handlers:
                if handler not in logger.handlers:
                    logger.addHandler(handler)
        self._saved.clear()
        try:
            self._turn_off()
        except Exception as exc:
            self.parser_errors.append(f"log capture: restoring torch's logs failed: {type(exc).__name__}: {exc}")
        if self._file is not None:
            try:
                self._file.close()
            except OSError as exc:
                self.parser_errors.append(f"debug log {self.log_path}: close failed: {exc}")
            self._file = None

    def emit(self, log_record: logging.LogRecord) -> None:
        try:
            if isinstance(log_record.msg, tuple) and not log_record.args:
                # torch 2.1 logs some records (recompiles) as a tuple of lines
                message = "\n".join(str(part) for part in log_record.msg)
            else:
                message = log_record.getMessage()
        except Exception as exc:  # a torch log call with bad format args must not stop the compile
            message = f"<unformattable log record: {exc!r}> {log_record.msg!r}"
        self.record_count += 1
        step = self.current_step()
        logged: Optional[LoggedException]
        try:
            logged = LoggedException.of(log_record.exc_info)
        except Exception as error:  # an exception whose str() fails must not stop the compile either
            logged = None
            self.parser_errors.append(f"logged exception unreadable: {type(error).__name__}: {error}")
        self._write(f"[step {step}] {log_record.levelname} {log_record.name} {message}\n", logged)
        self.feed(Record(log_record.name, log_record.levelname, message, logged, step))

    def feed(self, record: Record) -> None:
        """Hand one record to the parsers (a live log record, or one read back by ``replay``)."""
        traced = traced_user_line(record)
        if traced is not None:
            self._traced = traced
            return
        for parser in PARSERS:
            try:
                finding = parser(record)
            except Exception as exc:
                self.parser_errors.append(f"{parser.__name__}: {type(exc).__name__}: {exc}")
                continue
            if finding is not None:
                self._add(finding)

    def _add(self, finding: Finding) -> None:
        data = finding.data
        if finding.kind == "break_site" and data["reason"] in AT_INSTRUCTION:
            data["reason"] = self._raised_at_instruction() or data["reason"]  # as dynamo's counters name it
        if finding.kind == "break_site" and data["reason"] == ARG_MISMATCH:
            self._place_inline_error(data)
        if finding.kind == "hidden_error" and data["location"] is None and ARG_MISMATCH in data["message"]:
            data["location"] = self._traced  # the call dynamo was tracing when binding its arguments failed
        if finding.kind == "hidden_error":
            same = (data["key"], data["location"], data["decode_step"])
            if any(
                f.kind == "hidden_error"
                and (f.data["key"], f.data["location"], f.data["decode_step"]) == same
                and f.data["logger"] != data["logger"]
                for f in self.findings
            ):
                return  # one event that torch logged on two loggers
            if data["source"] == RECOMPILE_LIMIT:
                self._drop_refused_recompile(data["location"])
        self.findings.append(finding)

    def _place_inline_error(self, site: dict) -> None:
        """An error swallowed while binding an inlined call, not placed by a traced line, placed where
        the graph it ended ends: the site that follows it, with no other site between, in its step.
        One the log does not join to a site stays unplaced (said as unknown), never takes another's."""
        for found in reversed(self.findings):
            if found.kind == "break_site":
                return
            data = found.data
            if found.kind == "hidden_error" and ARG_MISMATCH in data["message"]:
                if data["location"] is None and data["decode_step"] == site["decode_step"]:
                    data["location"] = site["location"]
                return

    def _raised_at_instruction(self) -> Optional[str]:
        """The message of the break raised at an instruction, logged just before its site's reason."""
        newest = self.findings[-1] if self.findings else None
        return newest.data["message"] if newest is not None and newest.kind == "break_raised" else None

    def _drop_refused_recompile(self, location: Optional[str]) -> None:
        """torch logs "Recompiling function" before it checks the limit: the newest recompile of
        that function is the compile the limit refused, not a recompile."""
        for index in range(len(self.findings) - 1, -1, -1):
            found = self.findings[index]
            if found.kind == "recompile" and (location is None or found.data["location"] == location):
                del self.findings[index]
                return

    def _write(self, line: str, exc: Optional[LoggedException]) -> None:
        """Append to the debug log; a full disk stops the log, never the compile or the parsing."""
        if self._file is None:
            return
        try:
            self._file.write(line)
            if exc is not None:
                self._file.write(exc.logged())
        except (OSError, ValueError) as exc:
            self.parser_errors.append(f"debug log {self.log_path}: writing stopped: {exc}")
            self._file = None

    def of_kind(self, kind: str) -> list[dict]:
        return [f.data for f in self.findings if f.kind == kind]


def quiet_structured_trace() -> None:
    """No more TORCH_TRACE from this process (torch set it up at import from the environment): the
    timing pass must not pay for it, and the second generate call is not part of the diagnosed trace."""
    os.environ.pop("TORCH_TRACE", None)
    internal = getattr(getattr(sys.modules.get("torch"), "_logging", None), "_internal", None)
    trace_log: Any = getattr(internal, "trace_log", None)
    for handler in list(getattr(trace_log, "handlers", [])):
        trace_log.removeHandler(handler)


LEGACY_LOGGERS = ("torch._dynamo", "torch._inductor", "torch._functorch")


def capture_points(legacy: bool) -> list[logging.Logger]:
    """torch's loggers where propagation stops: a handler on each sees every record once.

    Without set_logs (torch 2.0) dynamo's loggers may propagate; then the ``torch`` logger is
    one more point, which sees each propagating record once (a record stops at the first
    logger that does not propagate, so it never reaches two of these).
    """
    loggers = []
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if not isinstance(logger, logging.Logger):
            continue
        if (
            (name == "torch" or name.startswith("torch."))
            and not logger.propagate
            and not _switched_off_artifact(logger)
        ):
            loggers.append(logger)
    top = logging.getLogger("torch")
    if legacy and top not in loggers:
        loggers.append(top)
    return loggers


def _switched_off_artifact(logger: logging.Logger) -> bool:
    """An artifact logger torch keeps off unless asked for by name (``sym_node``,
    ``trace_shape_events``, ...): torch stops its propagation so that the module's DEBUG level does
    not turn it on, and turns propagation on where it is enabled. A handler attached to it would
    log what TORCH_LOGS by hand never does (in a dynamic-shape decode step: 50,000 records and
    2 s of formatting sympy expressions), none of which a parser reads."""
    return bool(getattr(logger, "artifact_name", None))


def _writes_to_stream(handler: logging.Handler) -> bool:
    return type(handler) is logging.StreamHandler


_LOGGED = re.compile(r"^\[step (?P<step>None|-?\d+)\] (?P<level>[A-Z]+) (?P<logger>\S+) ", re.M)


def replay(log_text: str) -> LogCapture:
    """A debug log this module wrote, read back through the parsers: a capture's findings without
    the torch that produced them (the version fixtures in tests/ are replayed this way). A logged
    exception's marker and traceback follow its line in the log and are read back as that
    exception; a log written before the marker existed keeps the traceback in the message."""
    collector = LogCapture(Path(os.devnull), lambda: None)
    starts = list(_LOGGED.finditer(log_text))
    for index, start in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(log_text)
        step = None if start["step"] == "None" else int(start["step"])
        message, exc = LoggedException.split(log_text[start.end() : end].rstrip("\n"))
        collector.record_count += 1
        collector.feed(Record(start["logger"], start["level"], message, exc, step))
    return collector
