"""What changed in a recompile, as fields: parsed from every guard-failure wording in the recorded
runs of torch 2.1 to 2.15 (tests/fixtures/versions), and the value that grows with the decode step."""

from __future__ import annotations

import json

import pytest
from conftest import RECORDED

from diag import guards

VERSIONS = RECORDED.parent / "versions"


def _reasons(version: str) -> list[str]:
    found = []
    for path in sorted((VERSIONS / version).glob("*/diagnose.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("kind") == "recompile" and record.get("reason"):
                found.append(record["reason"])
    return found


@pytest.mark.parametrize("version", sorted(p.name for p in VERSIONS.iterdir() if p.is_dir()))
def test_every_recorded_wording_gives_subject_property_and_expected(version):
    for reason in _reasons(version):
        parsed = guards.parse(reason)
        assert parsed["guard_subject"] and parsed["guard_property"] and parsed["guard_expected"], (version, reason)


@pytest.mark.parametrize(
    "reason, subject, prop, expected, actual",
    [
        # 2.1 - 2.6: the subject as dynamo's source, L['...']
        ("tensor 'L['attention_mask']' size mismatch at index 1. expected 9, actual 10",
         "attention_mask", "size[1]", "9", "10"),
        ("tensor 'L['kwargs']['past_key_values'].layers[0].keys' size mismatch at index 2. expected 9, actual 10",
         "kwargs['past_key_values'].layers[0].keys", "size[2]", "9", "10"),
        ("tensor 'L['bias']' stride mismatch at index 0. expected 9, actual 10", "bias", "stride[0]", "9", "10"),
        # 2.7 on: the name as the user wrote it
        ("tensor 'kwargs['attention_mask']' size mismatch at index 1. expected 9, actual 10",
         "kwargs['attention_mask']", "size[1]", "9", "10"),
        ("tensor 'x' dtype mismatch. expected Float, actual Half", "x", "dtype", "Float", "Half"),
        ("___check_obj_id(L['layer'], 140303556428624)", "layer", "id", "140303556428624", None),
        ("___check_type_id(L['args'][0], 94504921509424)", "args[0]", "type", "94504921509424", None),
        ("L['kv_length'] == 9                # _dynamo/output_graph.py:452 in init_ambient_guards",
         "kv_length", "value", "9", None),
        ("L['key'] == 'last_hidden_state'", "key", "value", "last_hidden_state", None),
        ("len(L['args']) == 2", "args", "len", "2", None),
        ("valid_past_index.item() == 16  # cache_mask[:, valid_past_index] = 1  # dynamic_slice.py:18",
         "valid_past_index", "item", "16", None),
    ],
)  # fmt: skip
def test_wordings_torch_used(reason, subject, prop, expected, actual):
    assert guards.parse(reason) == {
        "guard_subject": subject,
        "guard_property": prop,
        "guard_expected": expected,
        "guard_actual": actual,
    }


def test_what_no_wording_matches_is_left_empty():
    assert guards.parse("something torch never said") == dict.fromkeys(guards.FIELDS)
    assert guards.parse(None) == dict.fromkeys(guards.FIELDS)


def test_a_value_that_grows_with_the_decode_step_is_found_and_a_steady_one_is_not():
    def rc(step, subject, prop, expected, actual=None):
        return {"decode_step": step, "guard_subject": subject, "guard_property": prop,
                "guard_expected": expected, "guard_actual": actual}  # fmt: skip

    found = [
        rc(1, "valid_past_index", "item", "16"),
        rc(2, "valid_past_index", "item", "17"),
        rc(3, "valid_past_index", "item", "18"),
        rc(1, "attention_mask", "size[1]", "17", "18"),  # one step only: no trend to speak of
        rc(1, "layer", "id", "140303556428624"),
        rc(2, "layer", "id", "140303556428624"),  # the same every step: not growing
        rc(None, "bias", "size[3]", "9", "10"),  # the prefill's
    ]
    assert guards.grows_with_the_step(found) == {("valid_past_index", "item")}
