"""Stable keys: the same problem gets the same key on every torch build.

Order of preference: the graph-break id torch prints (GBxxxx, from 2.8), else
the graph-break type (gb_type, from 2.7), else a fingerprint of the exception
type and its message with addresses, numbers, paths and ids stripped.

The probe computes every key (the collectors in capture.py and diagnose.py); the
orchestrator compares them as stored and never recomputes one. Standard library only.
"""

from __future__ import annotations

import hashlib
import re

_GB_ID = re.compile(r"\b(?:gb|GB)(\d{4})\b")
_NOISE = [
    (re.compile(r"0x[0-9a-fA-F]+"), "<addr>"),
    (re.compile(r"(?:/[\w.\-+~@]+)+/?"), "<path>"),
    (re.compile(r"[A-Za-z]:\\[\\\w.\-]+"), "<path>"),
    (re.compile(r"\bid=\d+|\bid\(\w+\)=\d+"), "id=<id>"),
    (re.compile(r"\b[su]\d+\b"), "<sym>"),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
    (re.compile(r"\s+"), " "),
]


def graph_break_id(text: str) -> str | None:
    """The GBxxxx id that torch ≥ 2.8 puts in a graph-break message, if any."""
    match = _GB_ID.search(text)
    return f"GB{match.group(1)}" if match else None


def normalise(message: str) -> str:
    """The message with run-specific details replaced by placeholders."""
    text = message.strip()
    for pattern, placeholder in _NOISE:
        text = pattern.sub(placeholder, text)
    return text.strip()


def fingerprint(exc_type: str, message: str, frame: str | None = None) -> str:
    """A short stable digest of exception type, normalised first line, and innermost user frame."""
    first_line = next((line for line in message.splitlines() if line.strip()), "")
    parts = [exc_type, normalise(first_line), _frame_key(frame)]
    digest = hashlib.sha1("\x1f".join(parts).encode("utf-8", "replace")).hexdigest()[:12]
    return f"{exc_type}:{digest}"


def _frame_key(frame: str | None) -> str:
    """``file:line`` reduced to the file's base name: lines move between versions of a case."""
    if not frame:
        return ""
    return frame.rsplit(":", 1)[0].replace("\\", "/").rsplit("/", 1)[-1]


def stable_key(exc_type: str, message: str, frame: str | None = None, gb_type: str | None = None) -> str:
    gb_id = graph_break_id(message)
    if gb_id:
        return gb_id
    if gb_type:
        return f"gb_type:{gb_type}"
    return fingerprint(exc_type, message, frame)
