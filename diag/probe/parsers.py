"""The log parsers: pure functions from one torch log record (or a stderr text) to a finding.

A graph-break, recompile or swallowed-error record becomes a ``Finding`` whose fields are the
finding record's (``records.py``). Nothing here touches logging or torch: ``capture.py`` feeds
the live records, ``capture.replay`` the records of a debug log written earlier, and the tests
the committed logs of every torch minor (tests/fixtures/versions).

Imports: standard library (and ``compat`` to unwrap a backend's exception).
"""

from __future__ import annotations

import json
import re
import traceback
from dataclasses import dataclass, field
from typing import Optional

from diag.probe import compat, keys

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')

_BREAK_AT = re.compile(r"Graph break.*? in user code at (?P<where>\S+:\d+)")

_REASON = re.compile(r"Graph Break Reason: (?P<reason>.*)", re.S)
# a record that names only where the break was: "Graph break: from user code at:" (2.3, 2.4), and
# "Graph break: skip: from user code at:" for a frame skipped whole (2.4 to 2.6)
_WORDLESS = re.compile(r"\s*Graph break: (?:skip: )?from user code at:")

# a resume function (the rest of a frame after a graph break) is named "<graph break in forward>"
_RECOMPILING = re.compile(r"Recompiling function (?P<fn><[^>\n]+>|\S+) in (?P<where>\S+:\d+)")

_GUARD_LINE = re.compile(r"^\s*-\s*(?:\d+/\d+:\s*)?(?P<guard>.+)$", re.M)

_GUARD_WITH_ID = re.compile(r"^\s*-\s*\d+/\d+:\s*(?P<guard>.+)$", re.M)  # 2.2+: "- 0/3: <guard>", one per entry

_GUARD_SINGLE = re.compile(r"triggered by the following guard failure: (?P<guard>.+)")  # 2.1

_LIMIT_HIT = re.compile(r"hit config\.(?:cache_size_limit|recompile_limit) \((?P<limit>\d+)\)")

_LIMIT_FUNCTION = re.compile(r"function: '(?P<fn>[^']+)' \((?P<where>[^)]+:\d+)\)")

_WONT_CONVERT = re.compile(r"WON'T CONVERT (?P<fn>\S+) (?P<file>\S+) line (?P<line>\d+)")

_EXC_LINE = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Unsupported|Failed|Exit|Interrupt)): ?(?P<msg>.*)$", re.M
)

# torch 2.0/2.1 log a TypeError from binding an inlined call's arguments as a plain warning,
# "<file> <function ...> [args] {kwargs} <error>", then report only "arg mismatch inlining".
_INLINE_ERROR = re.compile(
    r"^(?P<file>\S+\.py) (?P<fn><function (?P<name>\S+) at 0x[0-9a-f]+>|\S+) \[.*\] \{.*\} "
    r"(?P<msg>.+)$",
    re.S,
)

# A break dynamo could not resume from: the rest of the frame ran eagerly.
_NOT_RESUMED = ("cannot resume from", "Failed to handle graph break gracefully")

# Of those, one where dynamo compiled the frame up to the break (2.10 on): the frame was not given up
# (torch counts it ok), the break is the finding (parse_graph_break), and no error was swallowed.
_CUT_SHORT = "Compiling up to the previous resumable state"


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
        return cls(
            type(exc).__name__,
            str(exc),
            "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
            "Unsupported" in names,
        )

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
        head, _, tb = text[at + 1 + len(cls.MARKER) :].partition("\n")
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
    if (prefer and is_harness_file(prefer)) or any(is_harness_file(f[0]) for f in frames):
        # the architecture sweep: the code under test is the installed model's, not diag's harness
        model = [f for f in frames if not _is_diags(f[0])]
        frames = model or frames
        return f"{frames[-1][0]}:{frames[-1][1]}" if frames else None
    for narrower in (
        [f for f in frames if f[0] == prefer] if prefer else [],
        [f for f in frames if not _installed(f[0])],
    ):
        if narrower:
            frames = narrower
            break
    return f"{frames[-1][0]}:{frames[-1][1]}" if frames else None


HARNESS = "/diag/cases/_hf_arch.py"  # the one case file of every hf:<model_type>: the model is what it tests


def is_harness_file(path: str) -> bool:
    """diag's own harness of the transformers architectures: the line a user acts on is the model's."""
    return path.replace("\\", "/").endswith(HARNESS)


def _is_diags(path: str) -> bool:
    normalized = path.replace("\\", "/")
    return "/diag/probe/" in normalized or is_harness_file(normalized)


FROM_USER_CODE = "from user code:"  # where dynamo's errors list the user's frames


def is_torch_file(path: str) -> bool:
    """A file of torch itself (or of Python's own library), never the user's line."""
    normalized = path.replace("\\", "/")
    return (
        "/torch/" in normalized
        or normalized.startswith("<")
        or ("/lib/python3." in normalized and "-packages/" not in normalized)
    )


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
    marker = message.rfind(FROM_USER_CODE)
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
    if not reason_match and record.exc is not None and _WORDLESS.match(text):
        # 2.3 and 2.4 say a break's words only in the exception the record carries
        reason = record.exc.message.strip() or reason
    kind = gb_type(reason)
    location = break_location(text)
    return Finding(
        "graph_break",
        {
            "key": keys.stable_key("Unsupported", reason, location, kind),
            "reason": reason,
            "gb_type": kind,
            "location": location,
            "resumable": not _not_resumed(reason),
            "decode_step": record.step,
        },
    )


def gb_type(reason: str) -> Optional[str]:
    """gb_type from torch ≥ 2.7's structured message: the line that names the break.

    It follows 'Graph break encountered:' (2.7), or stands right above 'Explanation:'; on 2.13
    a generic 'Encountered graph break when attempting to trace CALL: ...' line comes first,
    and the named line ('Unsupported Tensor.item() call ...') two lines below it.
    """
    lines = [line.strip() for line in reason.splitlines()]
    for index, line in enumerate(lines):
        if line.endswith("Graph break encountered:"):
            following = [rest for rest in lines[index + 1 :] if rest]
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
    guards = (
        [m["guard"].strip() for m in _GUARD_WITH_ID.finditer(text)]
        or [m["guard"].strip() for m in _GUARD_LINE.finditer(text)]
        or [m["guard"].strip() for m in _GUARD_SINGLE.finditer(text)]
    )
    # The first guard listed belongs to the newest cache entry: it is the one that just failed.
    reason = guards[0] if guards else text.strip()
    location = head["where"] if head else None
    return Finding(
        "recompile",
        {
            "key": keys.fingerprint("Recompile", reason, location),
            "reason": reason,
            "function": head["fn"] if head else None,
            "location": location,
            "decode_step": record.step,
            "guard_failures": len(guards),
        },
    )


def parse_hidden_error(record: Record) -> Optional[Finding]:
    """An exception or fallback that torch logged instead of raising."""
    text = record.message
    if _CUT_SHORT in text:
        return None
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
    location: Optional[str] = f"{won_t['file']}:{won_t['line']}" if won_t else break_location(f"{text}\n{tb}")
    return Finding(
        "hidden_error",
        {
            "key": keys.stable_key(exc_type, keyed or message, location),
            "source": "frame_fallback" if fallback else "swallowed_exception",
            "exc_type": exc_type,
            "message": message,
            "logger": record.logger,
            "location": location,
            "traceback": tb,
            "decode_step": record.step,
        },
    )


def _recompile_limit(record: Record, limit: "re.Match[str]") -> Finding:
    """dynamo gave up recompiling a function: from here on it runs eagerly, and says so once."""
    function = _LIMIT_FUNCTION.search(record.message)
    location = function["where"] if function else None
    message = (
        f"recompile limit ({limit['limit']}) hit"
        + (f" for {function['fn']}" if function else "")
        + ": later calls run eagerly"
    )
    return Finding(
        "hidden_error",
        {
            "key": keys.stable_key("RecompileLimit", message, location),
            "source": RECOMPILE_LIMIT,
            "exc_type": "RecompileLimit",
            "message": message,
            "logger": record.logger,
            "location": location,
            "traceback": record.message,
            "decode_step": record.step,
        },
    )


RECOMPILE_LIMIT = "recompile_limit"


def limit_failure(error_type: str) -> bool:
    """Whether a raised error's type is dynamo's refusal to compile again under fullgraph
    (FailOnRecompileLimitHit, FailOnCacheLimitHit: its name holds "Limit"), whose record is the
    recompile-limit warning."""
    return "Limit" in error_type


ARG_MISMATCH = "arg mismatch inlining"  # what torch 2.0/2.1 say of a graph ended by an inlined call they could not bind


def _inline_error(record: Record, found: "re.Match[str]") -> Finding:
    """The error dynamo swallowed while binding an inlined call's arguments (2.0, 2.1 nightlies)."""
    message = found["msg"].strip()
    where = found["name"] or found["fn"]
    exc_type = "TypeError" if re.search(r"argument|positional|takes \d", message) else "Exception"
    return Finding(
        "hidden_error",
        {
            "key": keys.stable_key(exc_type, message, found["file"]),
            "source": "swallowed_exception",
            "exc_type": exc_type,
            "message": f"{message} (inlining {where} in {found['file']}; dynamo reported it as {ARG_MISMATCH})",
            "logger": record.logger,
            "location": None,
            "traceback": record.message,
            "decode_step": record.step,
        },
    )


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
        body = _TRACEBACK_START + block[: last.end()]
        found.append(
            {
                "exc_type": last["type"].rsplit(".", 1)[-1],
                "message": last["msg"].strip(),
                "location": innermost_user_frame(body),
                "traceback": body,
            }
        )
    return found
