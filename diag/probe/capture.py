"""Collectors that watch a compile: torch's own loggers at DEBUG, and dynamo's counters.

torch's loggers do not propagate to the root logger, so the handler is attached
to every torch logger that stops propagation. Each record is written to the
run's debug log and handed to the parsers below, which turn graph-break,
recompile and swallowed-error records into findings. ``install`` and
``uninstall`` always leave torch's logging as they found it.

Imports: standard library and torch.
"""

from __future__ import annotations

import json
import logging
import os
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
_GUARD_WITH_ID = re.compile(r"^\s*-\s*\d+/\d+:\s*(?P<guard>.+)$", re.M)  # 2.2+: "- 0/3: <guard>", one per entry
_GUARD_SINGLE = re.compile(r"triggered by the following guard failure: (?P<guard>.+)")  # 2.1
_LIMIT_HIT = re.compile(r"hit config\.(?:cache_size_limit|recompile_limit) \((?P<limit>\d+)\)")
_LIMIT_FUNCTION = re.compile(r"function: '(?P<fn>[^']+)' \((?P<where>[^)]+:\d+)\)")
_WONT_CONVERT = re.compile(r"WON'T CONVERT (?P<fn>\S+) (?P<file>\S+) line (?P<line>\d+)")
_EXC_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Unsupported|Failed|Exit|Interrupt)): ?(?P<msg>.*)$", re.M)
# torch 2.0/2.1 log a TypeError from binding an inlined call's arguments as a plain warning,
# "<file> <function ...> [args] {kwargs} <error>", then report only "arg mismatch inlining".
_INLINE_ERROR = re.compile(r"^(?P<file>\S+\.py) (?P<fn><function (?P<name>\S+) at 0x[0-9a-f]+>|\S+) \[.*\] \{.*\} "
                           r"(?P<msg>.+)$", re.S)
# A break dynamo could not resume from: the rest of the frame ran eagerly.
_NOT_RESUMED = ("cannot resume from", "Failed to handle graph break gracefully")


@dataclass
class Finding:
    kind: str  # a finding kind's record (statuses.FINDING_KINDS): graph_break | recompile | hidden_error
    data: dict = field(default_factory=dict)


@dataclass(frozen=True)
class LoggedException:
    """The exception object a log record carried (logging's ``exc_info``), as the parsers read it.

    The debug log writes it after the record's line as a marker line (its type, message and
    whether it is a graph break, as JSON) and its traceback, so a replay of the log hands the
    parsers what the live capture handed them.
    """

    type: str
    message: str
    traceback: str
    is_break: bool

    MARKER = "[logged exception] "

    @classmethod
    def of(cls, exc_info: Optional[tuple]) -> Optional["LoggedException"]:
        if not exc_info or exc_info[1] is None:
            return None
        exc = compat.unwrap_backend_error(exc_info[1])
        names = {klass.__name__ for klass in type(exc).__mro__}
        return cls(type(exc).__name__, str(exc),
                   "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), "Unsupported" in names)

    def logged(self) -> str:
        """What the debug log holds after the record's line."""
        head = json.dumps({"type": self.type, "message": self.message, "break": self.is_break})
        return f"{self.MARKER}{head}\n{self.traceback}"

    @classmethod
    def split(cls, text: str) -> tuple[str, Optional["LoggedException"]]:
        """A logged record's text, read back: its message and the exception written after it."""
        at = text.find("\n" + cls.MARKER)
        if at < 0:
            return text, None
        head, _, tb = text[at + 1 + len(cls.MARKER):].partition("\n")
        try:
            said = json.loads(head)
            return text[:at], cls(str(said["type"]), str(said["message"]), tb, bool(said["break"]))
        except (ValueError, KeyError, TypeError):
            return text, None


@dataclass
class Record:
    logger: str
    level: str
    message: str
    exc: Optional[LoggedException]
    step: Optional[int]


def innermost_user_frame(text: str, prefer: Optional[str] = None) -> Optional[str]:
    """``file:line`` of the innermost frame in ``text`` outside torch itself.

    ``prefer`` (a path) picks the innermost frame in that file when one exists:
    for a case, the line of the case file is the one a user acts on.
    """
    frames = [(m["file"], int(m["line"])) for m in _FRAME.finditer(text)]
    frames = [f for f in frames if not is_torch_file(f[0])]
    for narrower in ([f for f in frames if f[0] == prefer] if prefer else [],
                     [f for f in frames if not _installed(f[0])]):
        if narrower:
            frames = narrower
            break
    return f"{frames[-1][0]}:{frames[-1][1]}" if frames else None


def is_torch_file(path: str) -> bool:
    """A file of torch itself (or of Python's own library), never the user's line."""
    normalized = path.replace("\\", "/")
    return ("/torch/" in normalized or normalized.startswith("<")
            or ("/lib/python3." in normalized and "-packages/" not in normalized))


def _installed(path: str) -> bool:
    return "-packages/" in path.replace("\\", "/")


def _not_resumed(text: str) -> bool:
    return any(marker in text for marker in _NOT_RESUMED)


def break_location(text: str) -> Optional[str]:
    """Where a break happened: dynamo's "in user code at" line unless that is torch's own file."""
    where = _BREAK_AT.search(text)
    if where and not is_torch_file(where["where"].rsplit(":", 1)[0]):
        return where["where"]
    return innermost_user_frame(text) or (where["where"] if where else None)


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
    reason_match = _REASON.search(text)
    reason = reason_match["reason"].strip() if reason_match else text.strip()
    kind = gb_type(reason)
    location = break_location(text)
    return Finding("graph_break", {
        "key": keys.stable_key("Unsupported", reason, location, kind),
        "reason": reason,
        "gb_type": kind,
        "location": location,
        "resumable": not _not_resumed(reason),
        "decode_step": record.step,
    })


def gb_type(reason: str) -> Optional[str]:
    """gb_type from torch ≥ 2.7's structured message: the line that names the break.

    It follows 'Graph break encountered:' (2.7), or stands right above 'Explanation:'; on 2.13
    a generic 'Encountered graph break when attempting to trace CALL: ...' line comes first,
    and the named line ('Unsupported Tensor.item() call ...') two lines below it.
    """
    lines = [line.strip() for line in reason.splitlines()]
    for index, line in enumerate(lines):
        if line.endswith("Graph break encountered:"):
            following = [rest for rest in lines[index + 1:] if rest]
            return following[0] if following else None
    for index, line in enumerate(lines):
        if line.startswith("Explanation:"):
            above = [earlier for earlier in lines[:index] if earlier]
            return above[-1] if above else None
    return None


def parse_recompile(record: Record) -> Optional[Finding]:
    if not record.logger.endswith(("__recompiles", "__recompiles_verbose")):
        return None
    text = record.message
    head = _RECOMPILING.search(text)
    # One guard per failed cache entry: "- 0/3: ..." lines where torch numbers them (2.2+; verbose
    # logs add stack lines under each), else the plain "- ..." lines, else 2.1's one-guard sentence.
    guards = [m["guard"].strip() for m in _GUARD_WITH_ID.finditer(text)] or \
        [m["guard"].strip() for m in _GUARD_LINE.finditer(text)] or \
        [m["guard"].strip() for m in _GUARD_SINGLE.finditer(text)]
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
    limit = _LIMIT_HIT.search(text)
    if limit:
        return _recompile_limit(record, limit)
    keyed: Optional[str] = None  # what the key is made from, where it is not the message shown
    inline = _INLINE_ERROR.match(text.strip()) if record.logger.startswith("torch._dynamo") else None
    if inline and not record.exc:
        return _inline_error(record, inline)
    if record.exc is not None:
        exc_type, message, tb, is_break = record.exc.type, record.exc.message, record.exc.traceback, record.exc.is_break
    elif "Traceback (most recent call last)" in text or won_t:
        found = list(_EXC_LINE.finditer(text))
        exc_type = found[-1]["type"].rsplit(".", 1)[-1] if found else "Unknown"
        message = found[-1]["msg"] if found else text.strip().splitlines()[0]
        tb = text
        is_break = exc_type == "Unsupported"
    elif record.logger.endswith("__graph_breaks") and _not_resumed(text):
        # The rest of the frame silently runs in eager mode: a fallback the user never sees.
        reason = _REASON.search(text)
        said = (reason["reason"] if reason else text).strip()
        # shown: the named break ("Unsupported Tensor.item() call ..."), not the generic "cannot resume"
        # line; keyed on all torch said (its graph-break id, GB0124, where it gives one)
        exc_type, message, tb = "Unsupported", gb_type(said) or said, text
        keyed = said
        is_break = False
    else:
        return None
    fallback = bool(won_t) or _not_resumed(text)
    if is_break and not fallback:
        # dynamo's DEBUG traceback of the Unsupported behind a graph break (2.1 logs each one):
        # the break itself is the finding, not a swallowed error.
        return None
    if won_t:
        location = f"{won_t['file']}:{won_t['line']}"
    else:
        location = break_location(f"{text}\n{tb}")
    return Finding("hidden_error", {
        "key": keys.stable_key(exc_type, keyed or message, location),
        "source": "frame_fallback" if fallback else "swallowed_exception",
        "exc_type": exc_type,
        "message": message,
        "logger": record.logger,
        "location": location,
        "traceback": tb,
        "decode_step": record.step,
    })


def _recompile_limit(record: Record, limit: "re.Match[str]") -> Finding:
    """dynamo gave up recompiling a function: from here on it runs eagerly, and says so once."""
    function = _LIMIT_FUNCTION.search(record.message)
    location = function["where"] if function else None
    message = f"recompile limit ({limit['limit']}) hit" + (f" for {function['fn']}" if function else "") + \
        ": later calls run eagerly"
    return Finding("hidden_error", {
        "key": keys.stable_key("RecompileLimit", message, location),
        "source": RECOMPILE_LIMIT,
        "exc_type": "RecompileLimit",
        "message": message,
        "logger": record.logger,
        "location": location,
        "traceback": record.message,
        "decode_step": record.step,
    })


RECOMPILE_LIMIT = "recompile_limit"


def _inline_error(record: Record, found: "re.Match[str]") -> Finding:
    """The error dynamo swallowed while binding an inlined call's arguments (2.0, 2.1 nightlies)."""
    message = found["msg"].strip()
    where = found["name"] or found["fn"]
    exc_type = "TypeError" if re.search(r"argument|positional|takes \d", message) else "Exception"
    return Finding("hidden_error", {
        "key": keys.stable_key(exc_type, message, found["file"]),
        "source": "swallowed_exception",
        "exc_type": exc_type,
        "message": f"{message} (inlining {where} in {found['file']}; dynamo reported it as arg mismatch inlining)",
        "logger": record.logger,
        "location": None,
        "traceback": record.message,
        "decode_step": record.step,
    })


_TRACEBACK_START = "Traceback (most recent call last):"


_STDERR_RECORD = re.compile(r"^\[[^\]]+\] (?P<logger>torch\.\S+): \[(?P<level>[A-Z]+)\] (?P<msg>.*)$", re.M)


def errors_in_stderr(text: str) -> list[dict]:
    """The errors a pass's stderr shows: each Python traceback (its exception type, message,
    user-code location and the traceback), then each error torch 2.0's own log handler printed
    for an inlined call it could not bind (see _INLINE_ERROR)."""
    found = []
    for record in _STDERR_RECORD.finditer(text):
        inline = _INLINE_ERROR.match(record["msg"].strip())
        if inline:
            finding = _inline_error(Record(record["logger"], record["level"], record["msg"], None, None), inline)
            found.append({key: finding.data[key] for key in ("exc_type", "message", "location", "traceback")})
    blocks = text.split(_TRACEBACK_START)[1:]
    for block in blocks:
        ends = list(_EXC_LINE.finditer(block))
        if not ends:
            continue
        last = ends[0]
        body = _TRACEBACK_START + block[:last.end()]
        found.append({"exc_type": last["type"].rsplit(".", 1)[-1], "message": last["msg"].strip(),
                      "location": innermost_user_frame(body), "traceback": body})
    return found


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
        # torch without set_logs (2.0): levels set by hand, and what they were
        self._legacy = False
        self._legacy_levels: dict[str, int] = {}
        self._legacy_config: Optional[int] = None
        self._legacy_init: Optional[tuple] = None  # (torch._dynamo.logging, its own init_logging)
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
        except Exception as exc:
            self.parser_errors.append(f"log capture: turning torch's logs on failed: {type(exc).__name__}: {exc}")
        self._attach()

    def _attach(self) -> None:
        """This handler on every capture point, torch's stderr handlers off (what they were is saved once)."""
        saved = {id(logger) for logger, _, _ in self._saved}
        for logger in _capture_points(self._legacy):
            if id(logger) not in saved:
                self._saved.append((logger, logger.level, list(logger.handlers)))
            for handler in list(logger.handlers):
                if _writes_to_stream(handler):
                    logger.removeHandler(handler)
            if self not in logger.handlers:
                logger.addHandler(self)

    def _turn_on(self) -> None:
        if compat.debug_logs()[0]:
            import torch._logging

            torch._logging.set_logs(**compat.log_keywords({
                "dynamo": logging.DEBUG, "aot": logging.DEBUG, "inductor": logging.DEBUG,
                "graph_breaks": True, "recompiles": True, "recompiles_verbose": True,
            }))
            return
        self._legacy = True
        self._legacy_levels = {name: logging.getLogger(name).level for name in LEGACY_LOGGERS}
        import torch._dynamo.config as dynamo_config

        # torch 2.0 re-runs logging.config.dictConfig at every torch.compile (convert_frame's
        # init_logging), which replaces the handlers on its loggers: attach again after it.
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

        if hasattr(dynamo_config, "log_level"):
            self._legacy_config = dynamo_config.log_level
            dynamo_config.log_level = logging.DEBUG  # 2.0: a property that sets its loggers' levels
        for name in LEGACY_LOGGERS:
            logging.getLogger(name).setLevel(logging.DEBUG)

    def _turn_off(self) -> None:
        if not self._legacy:
            if compat.debug_logs()[0]:
                import torch._logging

                torch._logging.set_logs()
            return
        import torch._dynamo.config as dynamo_config

        if self._legacy_init is not None:
            module, original = self._legacy_init
            module.init_logging = original
            self._legacy_init = None
        if self._legacy_config is not None:
            dynamo_config.log_level = self._legacy_config
        for name, level in self._legacy_levels.items():
            logging.getLogger(name).setLevel(level)

    def uninstall(self) -> None:
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
        try:
            exc = LoggedException.of(log_record.exc_info)
        except Exception as error:  # an exception whose str() fails must not stop the compile either
            exc = None
            self.parser_errors.append(f"logged exception unreadable: {type(error).__name__}: {error}")
        self._write(f"[step {step}] {log_record.levelname} {log_record.name} {message}\n", exc)
        self.feed(Record(log_record.name, log_record.levelname, message, exc, step))

    def feed(self, record: Record) -> None:
        """Hand one record to the parsers (a live log record, or one read back by ``replay``)."""
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
        if finding.kind == "hidden_error":
            same = (data["key"], data["location"], data["decode_step"])
            if any(f.kind == "hidden_error" and (f.data["key"], f.data["location"], f.data["decode_step"]) == same
                   and f.data["logger"] != data["logger"] for f in self.findings):
                return  # one event that torch logged on two loggers
            if data["source"] == RECOMPILE_LIMIT:
                self._drop_refused_recompile(data["location"])
        self.findings.append(finding)

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


LEGACY_LOGGERS = ("torch._dynamo", "torch._inductor", "torch._functorch")


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
            self.seen.append({"logger": log_record.name, "level": log_record.levelname,
                              "exception": type(exc).__name__ if exc is not None else None})

    def noted(self) -> list[dict]:
        """What was seen, as the timing record keeps it: the first LIMIT, then how many more."""
        more = self.count - len(self.seen)
        return self.seen + ([{"more": more}] if more > 0 else [])

    def install(self) -> None:
        try:
            self._loggers = _capture_points(legacy=not compat.debug_logs()[0])
        except Exception:  # a view on the timing pass: it never stops the compile
            self._loggers = [logging.getLogger("torch")]
        for logger in self._loggers:
            logger.addHandler(self)

    def uninstall(self) -> None:
        for logger in self._loggers:
            logger.removeHandler(self)
        self._loggers = []


def graph_cache_hits() -> int:
    """How many compiled graphs inductor's FX graph cache and AOTAutograd's cache served so far."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"].get("fxgraph_cache_hit", 0)) + \
        int(counters["aot_autograd"].get("autograd_cache_hit", 0))


def _capture_points(legacy: bool) -> list[logging.Logger]:
    """torch's loggers where propagation stops: a handler on each sees every record once.

    Without set_logs (torch 2.0) dynamo's loggers may propagate; then the ``torch`` logger is
    one more point, which sees each propagating record once (a record stops at the first
    logger that does not propagate, so it never reaches two of these).
    """
    loggers = []
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if not isinstance(logger, logging.Logger):
            continue
        if (name == "torch" or name.startswith("torch.")) and not logger.propagate \
                and not _switched_off_artifact(logger):
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


def counter_snapshot() -> dict[str, dict[str, int]]:
    """dynamo's counters as plain dicts (they count every break; the log de-duplicates)."""
    from torch._dynamo.utils import counters

    return {group: {str(k): int(v) for k, v in values.items()} for group, values in counters.items()}


def clear_counters() -> None:
    from torch._dynamo.utils import counters

    counters.clear()


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
        message, exc = LoggedException.split(log_text[start.end():end].rstrip("\n"))
        collector.record_count += 1
        collector.feed(Record(start["logger"], start["level"], message, exc, step))
    return collector
