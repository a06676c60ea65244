"""What changed in a recompile, as fields: the guard's subject (the input or attribute), the property it
checked (size at an index, stride, dtype, id, type, value, length), the value it expected and, where
torch says it, the value it got. Parsed from the guard-failure wordings torch used from 2.1 to 2.15.
Pure, standard library only.

    tensor 'L['attention_mask']' size mismatch at index 1. expected 9, actual 10     (2.1 - 2.6)
    tensor 'attention_mask' size mismatch at index 1. expected 9, actual 10          (2.7 on)
    ___check_obj_id(L['layer'], 140303556428624)                                     (id)
    ___check_type_id(L['args'][0], 94504921509424)                                   (type)
    L['kv_length'] == 9    len(L['args']) == 2    valid_past_index.item() == 8       (value, length)
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Sequence

_TENSOR = re.compile(
    r"tensor '(?P<subject>.+?)' (?P<property>[a-z_ ]+?) mismatch(?: at index (?P<index>\d+))?\.\s*"
    r"expected (?P<expected>.+?), actual (?P<actual>.+?)\s*$"
)
_CHECK = re.compile(r"___check_(?P<property>obj_id|type_id)\((?P<subject>.+), (?P<expected>-?\d+)\)\s*$")
_LEN = re.compile(r"len\((?P<subject>.+)\) == (?P<expected>.+?)\s*$")
_EQUALS = re.compile(r"(?P<subject>.+?)(?P<item>\.item\(\))? == (?P<expected>.+?)\s*$")
_LOCAL = re.compile(r"L\['([^']+)'\]")

FIELDS = ("guard_subject", "guard_property", "guard_expected", "guard_actual")


def subject_name(text: str) -> str:
    """``L['kwargs']['attention_mask']`` as torch 2.7 on writes it: ``kwargs['attention_mask']``."""
    text = text.strip()
    head = re.match(r"L\['([^']+)'\]", text)
    return head.group(1) + text[head.end() :] if head else text


def parse(reason: Optional[str]) -> dict[str, Optional[str]]:
    """The four guard fields of one recompile reason (its first guard; torch's ``# source`` comment
    and anything after a newline ignored); all None where the wording is not one torch used."""
    empty: dict[str, Optional[str]] = dict.fromkeys(FIELDS)
    if not reason:
        return empty
    line = reason.strip().splitlines()[0].split("  # ")[0].split(" # ")[0].strip()
    found = _TENSOR.match(line)
    if found:
        prop = found["property"].strip()
        if found["index"] is not None:
            prop = f"{prop}[{found['index']}]"
        return _fields(found["subject"], prop, found["expected"], found["actual"])
    found = _CHECK.match(line)
    if found:
        return _fields(found["subject"], "id" if found["property"] == "obj_id" else "type", found["expected"], None)
    found = _LEN.match(line)
    if found:
        return _fields(found["subject"], "len", found["expected"], None)
    found = _EQUALS.match(line)
    if found and not found["subject"].startswith("___"):
        return _fields(found["subject"], "item" if found["item"] else "value", found["expected"], None)
    return empty


def _fields(subject: str, prop: str, expected: str, actual: Optional[str]) -> dict[str, Optional[str]]:
    return {
        "guard_subject": subject_name(subject),
        "guard_property": prop,
        "guard_expected": expected.strip().strip("'\""),
        "guard_actual": actual.strip().strip("'\"") if actual is not None else None,
    }


def _number(text: Optional[str]) -> Optional[int]:
    return int(text) if text is not None and re.fullmatch(r"-?\d+", text) else None


def grows_with_the_step(recompiles: Sequence[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """(subject, property) pairs of one run whose value grew with the decode step: at two decode steps
    or more, the value the guard got (else the one it expected) rises with the step. The classic
    dynamic-length cache: a sequence length that is one longer at every step."""
    seen: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for item in recompiles:
        step = item.get("decode_step")
        value = _number(item.get("guard_actual")) if item.get("guard_actual") is not None else None
        value = value if value is not None else _number(item.get("guard_expected"))
        if step is None or step < 0 or value is None or not item.get("guard_subject"):  # decode steps only
            continue
        seen.setdefault((item["guard_subject"], item["guard_property"]), []).append((step, value))
    found = set()
    for key, points in seen.items():
        points.sort()
        steps = {step for step, _ in points}
        if len(steps) >= 2 and all(b[1] > a[1] for a, b in zip(points, points[1:]) if b[0] > a[0]):
            found.add(key)
    return found
