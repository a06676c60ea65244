"""Where torch 2.0 to 2.4 ended a graph at a break, from the DEBUG log's graph-compile reasons, and
the parsers of every log record (PARSERS: parsers.py's, then these two).

Imports: standard library.
"""

from __future__ import annotations

import re
from typing import Callable, Optional

from diag.probe.parsers import Finding, Record, is_torch_file, parse_graph_break, parse_hidden_error, parse_recompile

# Where a graph ended early, dynamo's DEBUG log says why and at which user frames (2.0, which logs no
# graph-break record, to 2.4 at least)
# ("COMPILING GRAPH due to GraphCompileReason(reason='...', user_stack=[<FrameSummary file F, line N in fn>])")
_COMPILE_REASON = re.compile(
    r"COMPILING GRAPH due to GraphCompileReason\(reason=(?P<q>['\"])(?P<reason>.*?)(?P=q), user_stack=\["
)
_FRAME_SUMMARY = re.compile(r"<FrameSummary file (?P<file>.+?), line (?P<line>\d+) in (?P<fn><[^>]*>|[^>]*)>")
# the graph ended because the frame ended, not at a break
_NOT_A_BREAK = ("return_value",)
# a reason that names only the instruction a break was raised at; the break's own message is the
# exception of the "<instruction> triggered compile" record dynamo logged just before
AT_INSTRUCTION = ("step_unsupported", "generic_jump", "store_attr")
_TRIGGERED = "triggered compile"
# the source of a function Python generated (a dataclass's __init__, a namedtuple's __new__): torch
# names it and its function, and it is the only frame of a break in a frame of its own
GENERATED = "<string>"
_RESUMED_FN = re.compile(r"^<graph break in (?P<fn>.+)>$")


# the line dynamo is tracing, which torch 2.0 logs at DEBUG before each ("TRACE starts_line <file>:<line>")
_TRACED = re.compile(r"^TRACE starts_line (?P<file>\S+?):(?P<line>\d+)")


def traced_user_line(record: Record) -> Optional[str]:
    """The line of the user's code dynamo went on to trace, where ``record`` says one (torch 2.0; later
    builds log it only under the ``trace_source`` artifact): an error swallowed while binding a call
    happened at the newest such line, the call's."""
    if not record.logger.startswith("torch._dynamo.symbolic_convert"):
        return None
    found = _TRACED.match(record.message)
    if found is None or is_torch_file(found["file"]):
        return None
    return f"{found['file']}:{found['line']}"


def parse_break_site(record: Record) -> Optional[Finding]:
    """Where dynamo ended a graph at a break: the reason (a break's message, or one of AT_INSTRUCTION
    for a break raised at that instruction) and the innermost user frame, else the generated
    function torch names (``<string>:3 in __init__``). Used to place the breaks taken from dynamo's
    counters, which carry no location (findings.py)."""
    if not record.logger.endswith("output_graph"):
        return None
    found = _COMPILE_REASON.search(record.message)
    if not found or found["reason"] in _NOT_A_BREAK:
        return None
    frames = list(_FRAME_SUMMARY.finditer(record.message[found.end() :]))
    users = [f"{m['file']}:{m['line']}" for m in frames if not is_torch_file(m["file"])]
    if not users and frames and frames[-1]["file"] == GENERATED:
        resumed = _RESUMED_FN.match(frames[-1]["fn"])
        users = [f"{GENERATED}:{frames[-1]['line']} in {resumed['fn'] if resumed else frames[-1]['fn']}"]
    if not users:
        return None
    return Finding("break_site", {"reason": found["reason"], "location": users[-1], "decode_step": record.step})


def parse_break_raised(record: Record) -> Optional[Finding]:
    """The break dynamo raised at an instruction ("STORE_ATTR triggered compile", "step triggered
    compile", with the exception): the message of the break_site that follows, whose reason names only
    the instruction (AT_INSTRUCTION; LogCapture joins the two)."""
    if record.exc is None or not record.exc.is_break or not record.message.rstrip().endswith(_TRIGGERED):
        return None
    return Finding("break_raised", {"message": record.exc.message, "decode_step": record.step})


PARSERS: list[Callable[[Record], Optional[Finding]]] = [
    parse_graph_break,
    parse_recompile,
    parse_hidden_error,
    parse_break_site,
    parse_break_raised,
]
