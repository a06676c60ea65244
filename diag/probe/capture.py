"""Collectors that watch a compile: torch's own loggers at DEBUG, and dynamo's counters.

torch's loggers do not propagate to the root logger, so the handler is attached
to every torch logger that stops propagation. Each record is written to the
run's debug log and handed to the parsers below, which turn graph-break,
recompile and swallowed-error records into findings. ``install`` and
``uninstall`` always leave torch's logging as they found it.

Imports: standard library and torch.
"""

from __future__ import annotations

import logging
import re
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, TextIO

from diag.probe import compat, keys

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_BREAK_AT = re.compile(r"Graph break.*? in user code at (?P<where>\S+:\d+)")
_REASON = re.compile(r"Graph Break Reason: (?P<reason>.*)", re.S)
_RECOMPILING = re.compile(r"Recompiling function (?P<fn>\S+) in (?P<where>\S+:\d+)")
_GUARD_LINE = re.compile(r"^\s*-\s*(?:\d+/\d+:\s*)?(?P<guard>.+)$", re.M)
_WONT_CONVERT = re.compile(r"WON'T CONVERT (?P<fn>\S+) (?P<file>\S+) line (?P<line>\d+)")
_EXC_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Unsupported|Failed|Exit|Interrupt)): ?(?P<msg>.*)$", re.M)
_CANNOT_RESUME = "cannot resume from"


@dataclass
class Finding:
    kind: str  # a finding kind's record (statuses.FINDING_KINDS): graph_break | recompile | hidden_error
    data: dict = field(default_factory=dict)


@dataclass
class Record:
    logger: str
    level: str
    message: str
    exc_info: Optional[tuple]
    step: Optional[int]


def innermost_user_frame(text: str, prefer: Optional[str] = None) -> Optional[str]:
    """``file:line`` of the innermost frame in ``text`` outside torch itself.

    ``prefer`` (a path) picks the innermost frame in that file when one exists:
    for a case, the line of the case file is the one a user acts on.
    """
    frames = [(m["file"], int(m["line"])) for m in _FRAME.finditer(text)]
    frames = [f for f in frames if "/torch/" not in f[0] and "site-packages" not in f[0]]
    if prefer:
        preferred = [f for f in frames if f[0] == prefer]
        if preferred:
            frames = preferred
    return f"{frames[-1][0]}:{frames[-1][1]}" if frames else None


def user_code_section(message: str) -> str:
    """The ``from user code:`` stack dynamo appends to its errors, or the whole message."""
    marker = message.rfind("from user code:")
    return message[marker:] if marker >= 0 else message


def parse_graph_break(record: Record) -> Optional[Finding]:
    if not record.logger.endswith("__graph_breaks"):
        return None
    text = record.message
    if _WONT_CONVERT.search(text):
        # Some torch versions echo a frame's fallback on the graph-break log; it is the same event
        # as the graph break logged next to it, and a hidden error, not a second break.
        return None
    where = _BREAK_AT.search(text)
    reason_match = _REASON.search(text)
    reason = reason_match["reason"].strip() if reason_match else text.strip()
    kind = gb_type(reason)
    location = where["where"] if where else innermost_user_frame(text)
    return Finding("graph_break", {
        "key": keys.stable_key("Unsupported", reason, location, kind),
        "reason": reason,
        "gb_type": kind,
        "location": location,
        "resumable": _CANNOT_RESUME not in reason,
        "decode_step": record.step,
    })


def gb_type(reason: str) -> Optional[str]:
    """gb_type from torch ≥ 2.7's structured message: the line after 'Graph break encountered:'."""
    lines = [line.strip() for line in reason.splitlines()]
    for index, line in enumerate(lines):
        if line.endswith("Graph break encountered:"):
            following = [rest for rest in lines[index + 1:] if rest]
            return following[0] if following else None
    if len(lines) > 1 and lines[1].startswith("Explanation:"):
        return lines[0]
    return None


def parse_recompile(record: Record) -> Optional[Finding]:
    if not record.logger.endswith(("__recompiles", "__recompiles_verbose")):
        return None
    text = record.message
    head = _RECOMPILING.search(text)
    guards = [m["guard"].strip() for m in _GUARD_LINE.finditer(text)]
    # The first guard listed belongs to the newest cache entry: it is the one that just failed.
    reason = guards[0] if guards else text.strip()
    location = head["where"] if head else None
    return Finding("recompile", {
        "key": keys.fingerprint("Recompile", reason, location),
        "reason": reason,
        "function": head["fn"] if head else None,
        "location": location,
        "decode_step": record.step,
        "guard_failures": len(guards),
    })


def parse_hidden_error(record: Record) -> Optional[Finding]:
    """An exception or fallback that torch logged instead of raising."""
    text = record.message
    won_t = _WONT_CONVERT.search(text)
    if record.exc_info and record.exc_info[1] is not None:
        exc = compat.unwrap_backend_error(record.exc_info[1])
        exc_type, message = type(exc).__name__, str(exc)
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    elif "Traceback (most recent call last)" in text or won_t:
        found = list(_EXC_LINE.finditer(text))
        exc_type = found[-1]["type"].rsplit(".", 1)[-1] if found else "Unknown"
        message = found[-1]["msg"] if found else text.strip().splitlines()[0]
        tb = text
    elif record.logger.endswith("__graph_breaks") and _CANNOT_RESUME in text:
        # The rest of the frame silently runs in eager mode: a fallback the user never sees.
        reason = _REASON.search(text)
        exc_type, message, tb = "Unsupported", (reason["reason"] if reason else text).strip(), text
    else:
        return None
    source = "frame_fallback" if (won_t or _CANNOT_RESUME in text) else "swallowed_exception"
    if won_t:
        location = f"{won_t['file']}:{won_t['line']}"
    else:
        where = _BREAK_AT.search(text)
        location = where["where"] if where else innermost_user_frame(text)
    return Finding("hidden_error", {
        "key": keys.stable_key(exc_type, message, location),
        "source": source,
        "exc_type": exc_type,
        "message": message,
        "logger": record.logger,
        "location": location,
        "traceback": tb,
        "decode_step": record.step,
    })


PARSERS: list[Callable[[Record], Optional[Finding]]] = [parse_graph_break, parse_recompile, parse_hidden_error]


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
        self.parser_errors: list[str] = []
        self.record_count = 0
        self._file: Optional[TextIO] = None
        self._saved: list[tuple[logging.Logger, int, list[logging.Handler]]] = []
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))

    def install(self) -> None:
        if self._file is not None:
            return
        import torch._logging

        self._file = open(self.log_path, "w", encoding="utf-8", errors="backslashreplace")
        torch._logging.set_logs(**compat.log_keywords({
            "dynamo": logging.DEBUG, "aot": logging.DEBUG, "inductor": logging.DEBUG,
            "graph_breaks": True, "recompiles": True, "recompiles_verbose": True,
        }))
        for logger in _stopping_torch_loggers():
            self._saved.append((logger, logger.level, list(logger.handlers)))
            for handler in list(logger.handlers):
                if _writes_to_stream(handler):
                    logger.removeHandler(handler)
            logger.addHandler(self)

    def uninstall(self) -> None:
        import torch._logging

        for logger, level, handlers in self._saved:
            logger.removeHandler(self)
            logger.setLevel(level)
            for handler in handlers:
                if handler not in logger.handlers:
                    logger.addHandler(handler)
        self._saved.clear()
        torch._logging.set_logs()
        if self._file is not None:
            try:
                self._file.close()
            except OSError as exc:
                self.parser_errors.append(f"debug log {self.log_path}: close failed: {exc}")
            self._file = None

    def emit(self, log_record: logging.LogRecord) -> None:
        try:
            message = log_record.getMessage()
        except Exception as exc:  # a torch log call with bad format args must not stop the compile
            message = f"<unformattable log record: {exc!r}> {log_record.msg!r}"
        self.record_count += 1
        step = self.current_step()
        self._write(f"[step {step}] {log_record.levelname} {log_record.name} {message}\n", log_record)
        record = Record(log_record.name, log_record.levelname, message, log_record.exc_info, step)
        for parser in PARSERS:
            try:
                finding = parser(record)
            except Exception as exc:
                self.parser_errors.append(f"{parser.__name__}: {type(exc).__name__}: {exc}")
                continue
            if finding is not None:
                self.findings.append(finding)

    def _write(self, line: str, log_record: logging.LogRecord) -> None:
        """Append to the debug log; a full disk stops the log, never the compile or the parsing."""
        if self._file is None:
            return
        try:
            self._file.write(line)
            if log_record.exc_info:
                self._file.write("".join(traceback.format_exception(*log_record.exc_info)))
        except (OSError, ValueError) as exc:
            self.parser_errors.append(f"debug log {self.log_path}: writing stopped: {exc}")
            self._file = None

    def of_kind(self, kind: str) -> list[dict]:
        return [f.data for f in self.findings if f.kind == kind]


def _stopping_torch_loggers() -> list[logging.Logger]:
    """torch's loggers where propagation stops: a handler on each sees every record once."""
    loggers = []
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if not isinstance(logger, logging.Logger):
            continue
        if (name == "torch" or name.startswith("torch.")) and not logger.propagate:
            loggers.append(logger)
    return loggers


def _writes_to_stream(handler: logging.Handler) -> bool:
    return type(handler) is logging.StreamHandler


def counter_snapshot() -> dict[str, dict[str, int]]:
    """dynamo's counters as plain dicts (they count every break; the log de-duplicates)."""
    from torch._dynamo.utils import counters

    return {group: {str(k): int(v) for k, v in values.items()} for group, values in counters.items()}


def clear_counters() -> None:
    from torch._dynamo.utils import counters

    counters.clear()
