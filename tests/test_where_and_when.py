"""Where and when each event happened, against what torch's own log says (recorded runs, replayed).

- tests/cases/layer_calls_attention.py on torch 2.0.1 (a decoder layer calling its attention, and the
  attention a helper, each through a default tensor argument; the forward watched, so the prefill
  compiles as each decode step does): every "arg mismatch inlining" break torch counted is stored at
  the place its log ended a graph for it, per place and step, the prefill included; every ``guards``
  TypeError torch swallowed at the call dynamo was tracing when binding failed.
- tests/cases/fake_raises_type_error.py on torch 2.13 (a custom op's fake implementation raises a
  TypeError, dynamo told to suppress errors): one frame given up, one hidden error.

The expected counts are read from the fixture's log with plain patterns, not with diag's parsers.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from test_versions import _replayed as recorded_replay

from diag.probe import records
from diag.probe.record_types import Found
from diag.text import place, step_span

VERSIONS = Path(__file__).parent / "fixtures" / "versions"
LAYERED = VERSIONS / "2.0.1+cu117" / "layer_calls_attention-no-fullgraph"
LAYERED_FULLGRAPH = VERSIONS / "2.0.1+cu117" / "layer_calls_attention-fullgraph"
FAKE_RAISES = VERSIONS / "2.13.0+cpu" / "fake_raises_type_error-no-fullgraph"

_STEP = r"^\[step (?P<step>None|-?\d+)\] "
_GRAPH_END = re.compile(
    _STEP + r"DEBUG torch\._dynamo\.output_graph COMPILING GRAPH due to GraphCompileReason\(reason='arg mismatch "
    r"inlining', user_stack=\[.*line (?P<line>\d+) in [^\]]*\]\)$",
    re.M,
)
_TRACED = re.compile(_STEP + r"DEBUG torch\._dynamo\.symbolic_convert TRACE starts_line \S+?:(?P<line>\d+)$")
_BINDING = re.compile(_STEP + r"WARNING torch\._dynamo\.symbolic_convert \S+ <function (?P<fn>\S+) at 0x")


def _line(location: str) -> int:
    return int(location.rsplit(":", 1)[1])


def _step(text: str) -> int:
    return int(text)  # the prefill is recorded as -1 (records.PREFILL), a step not known as None


def test_the_prefill_is_a_step_of_its_own_and_a_span_says_it():
    assert records.PREFILL == -1
    assert step_span(-1, 2) == "prefill and steps 0-2"
    assert step_span(-1, 0) == "prefill and step 0"
    assert step_span(-1, -1) == "prefill"
    assert step_span(1, 3) == "steps 1-3" and step_span(2) == "step 2" and step_span(None) == ""


def test_a_counted_break_is_a_row_per_place_torch_ended_a_graph_at_with_its_own_steps(tmp_path):
    log = (LAYERED / "torch_debug.log").read_text(encoding="utf-8")
    ends: dict[int, list[int]] = {}
    for found in _GRAPH_END.finditer(log):
        ends.setdefault(int(found["line"]), []).append(_step(found["step"]))
    assert len(ends) == 2 and -1 in ends[min(ends)], ends  # two places, each also in the prefill
    breaks = Found(recorded_replay(LAYERED, tmp_path)).all(records.GRAPH_BREAK)
    stored = {_line(b["location"]): (b["count"], b["decode_step"], b["last_decode_step"]) for b in breaks}
    assert stored == {line: (len(steps), min(steps), max(steps)) for line, steps in ends.items()}
    counted = Found(records.read(LAYERED / "diagnose.jsonl")[0]).first(records.RESULT)["counters"]["graph_break"]
    assert sum(b["count"] for b in breaks) == counted["arg mismatch inlining"]


def test_each_swallowed_binding_error_is_placed_at_the_call_dynamo_was_tracing(tmp_path):
    log = (LAYERED / "torch_debug.log").read_text(encoding="utf-8")
    expected: Counter[tuple[str, int]] = Counter()
    traced = None
    for record in re.finditer(r"^\[step [^\]]*\] .*$", log, re.M):
        if found := _TRACED.match(record[0]):
            traced = int(found["line"])
        elif found := _BINDING.match(record[0]):
            expected[(found["fn"], traced)] += 1
    assert None not in {line for _, line in expected}
    assert len({line for _, line in expected}) == 2, expected  # the layer's call and the attention's
    hidden = Found(recorded_replay(LAYERED, tmp_path)).all(records.HIDDEN_ERROR)
    stored = Counter()
    for item in hidden:
        inlined = re.search(r"\(inlining (\S+) in ", item["message"])
        stored[(inlined[1], _line(item["location"]))] += item["count"]
    assert stored == expected
    counted = Found(records.read(LAYERED / "diagnose.jsonl")[0]).first(records.RESULT)["counters"]["inline_call"]
    assert sum(stored.values()) == counted["arg mismatch inlining"]


def test_under_fullgraph_the_error_behind_the_raised_one_is_kept_at_its_call(tmp_path):
    result = Found(records.read(LAYERED_FULLGRAPH / "diagnose.jsonl")[0]).first(records.RESULT)
    assert result["error_type"] == "Unsupported" and result["error_message"].startswith("arg mismatch inlining")
    (hidden,) = Found(recorded_replay(LAYERED_FULLGRAPH, tmp_path)).all(records.HIDDEN_ERROR)
    assert hidden["exc_type"] == "TypeError" and "'guards'" in hidden["message"]
    calls = (Path(__file__).parent / "cases" / "layer_calls_attention.py").read_text().splitlines()
    assert "self.self_attn(" in calls[_line(hidden["location"]) - 1] and hidden["decode_step"] == -1


def test_a_fallback_naming_a_swallowed_error_is_one_hidden_error_at_the_line_that_raised_it(tmp_path):
    result = Found(records.read(FAKE_RAISES / "diagnose.jsonl")[0]).first(records.RESULT)
    frames = result["counters"]["frames"]
    log = (FAKE_RAISES / "torch_debug.log").read_text(encoding="utf-8")
    assert "got TypeError('halve_rows has no meta kernel for this layout')" in log
    hidden = Found(recorded_replay(FAKE_RAISES, tmp_path)).all(records.HIDDEN_ERROR)
    assert sum(h["count"] for h in hidden) == frames["total"] - frames["ok"] == 1, hidden
    (one,) = hidden
    assert one["exc_type"] == "TypeError" and one["source"] == "frame_fallback"
    raised = Path(one["location"].rsplit(":", 1)[0]).name, _line(one["location"])
    source = (Path(__file__).parent / "cases" / "fake_raises_type_error.py").read_text().splitlines()
    assert raised[0] == "fake_raises_type_error.py" and "raise TypeError" in source[raised[1] - 1]


def test_a_place_diag_cannot_make_is_said_unknown_with_its_reason():
    inline = {"location": None, "message": "x (inlining f in a.py; dynamo reported it as arg mismatch inlining)"}
    assert place(inline).startswith("unknown (torch named only the inlined function's file")
    assert place({"location": None, "reason": "something"}) == "unknown (torch's records named no line)"
    assert place({"location": "a.py:3"}) == "a.py:3"
