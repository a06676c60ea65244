"""Pure pieces: stable keys, status classification, probe-outcome verdicts, spec parsing."""

from __future__ import annotations

import pytest

from diag.probe import keys
from diag.probe.diagnose import classify
from diag.probe.findings import group
from diag.probe.parsers import Record, parse_graph_break, parse_hidden_error, parse_recompile
from diag.run.assemble import probe_failure
from diag.run.rundir import PassOutcome


def test_fingerprint_ignores_addresses_numbers_and_paths():
    a = keys.fingerprint("TypeError", "bad object at 0x7f00aa12 in /tmp/x/1.py size 13", "/a/b/case.py:10")
    b = keys.fingerprint("TypeError", "bad object at 0x7fffffff in /home/u/2.py size 99", "/c/case.py:42")
    assert a == b
    assert a != keys.fingerprint("ValueError", "bad object at 0x7f00aa12 in /tmp/x/1.py size 13")


def test_stable_key_prefers_gb_id_then_gb_type():
    assert keys.stable_key("Unsupported", "see .../gb/gb0124.html", gb_type="x") == "GB0124"
    assert keys.stable_key("Unsupported", "no id here", gb_type="Tensor.item()") == "gb_type:Tensor.item()"
    assert keys.stable_key("Unsupported", "no id here").startswith("Unsupported:")


GRAPH_BREAK = (
    "Graph break in user code at /w/cases/dynamic_slice.py:19\n"
    "Graph Break Reason: Encountered graph break that we cannot resume from. Compiling up to the previous "
    "resumable state, then skipping the rest of the function. Graph break encountered:\n\n"
    "Unsupported Tensor.item() call with capture_scalar_outputs=False\n"
    "  Explanation: Dynamo does not support tracing `Tensor.item()`.\n"
    " For more details about this graph break, please visit: https://x/gb/gb0124.html"
)


def test_graph_break_record_parses_location_type_and_id():
    finding = parse_graph_break(Record("torch._dynamo.symbolic_convert.__graph_breaks", "DEBUG", GRAPH_BREAK, None, 3))
    assert finding.data["location"] == "/w/cases/dynamic_slice.py:19"
    assert finding.data["gb_type"] == "Unsupported Tensor.item() call with capture_scalar_outputs=False"
    assert finding.data["key"] == "GB0124"
    assert finding.data["resumable"] is False
    assert finding.data["decode_step"] == 3


def test_a_break_compiled_up_to_is_not_a_hidden_error_but_a_frame_given_up_is():
    """The break dynamo compiled the frame up to (torch counts the frame ok) is the graph break alone;
    the one where it skipped the whole function is a frame it gave up on: a hidden fallback."""
    log = "torch._dynamo.symbolic_convert.__graph_breaks"
    assert parse_hidden_error(Record(log, "DEBUG", GRAPH_BREAK, None, 0)) is None
    skipped = GRAPH_BREAK.replace(
        "Encountered graph break that we cannot resume from. Compiling up to the previous resumable state, then "
        "skipping the rest of the function.",
        "Failed to handle graph break gracefully. Skipping the function and falling back to eager.",
    )
    finding = parse_hidden_error(Record(log, "DEBUG", skipped, None, 0))
    assert finding.data["source"] == "frame_fallback"
    assert finding.data["location"] == "/w/cases/dynamic_slice.py:19"


def test_recompile_record_takes_the_newest_guard_failure():
    text = (
        "Recompiling function decode_step in /w/cases/x.py:15\n"
        "    triggered by the following guard failure(s):\n"
        "    - 0/1: tensor 'bias' size mismatch at index 3. expected 13, actual 14\n"
        "    - 0/0: tensor 'bias' size mismatch at index 3. expected 12, actual 14\n"
    )
    finding = parse_recompile(Record("torch._dynamo.guards.__recompiles_verbose", "DEBUG", text, None, 2))
    assert finding.data["reason"].startswith("tensor 'bias' size mismatch")
    assert "expected 13" in finding.data["reason"]
    assert finding.data["guard_failures"] == 2
    assert finding.data["function"] == "decode_step"


def test_wont_convert_text_without_exc_info_is_parsed():
    text = (
        "WON'T CONVERT forward /w/m.py line 12\ndue to:\nTraceback (most recent call last):\n"
        '  File "/x/torch/_dynamo/convert_frame.py", line 1, in f\n'
        "TypeError: VariableBuilder.__init__() got an unexpected keyword argument 'guards'\n"
    )
    finding = parse_hidden_error(Record("torch._dynamo.convert_frame", "WARNING", text, None, None))
    assert finding.data["exc_type"] == "TypeError"
    assert "'guards'" in finding.data["message"]
    assert finding.data["location"] == "/w/m.py:12"


def test_wont_convert_echoed_on_the_graph_break_log_is_not_a_second_break():
    text = "WON'T CONVERT decode_step /w/cases/dynamic_slice.py line 15\n===== TorchDynamo Stack Trace =====\n"
    record = Record("torch._dynamo.symbolic_convert.__graph_breaks", "DEBUG", text, None, 0)
    assert parse_graph_break(record) is None
    assert parse_hidden_error(record).data["source"] == "frame_fallback"


def test_plain_debug_records_are_not_findings():
    record = Record("torch._dynamo.output_graph", "DEBUG", "Step 2: calling compiler function eager", None, 0)
    assert all(parse(record) is None for parse in (parse_graph_break, parse_recompile, parse_hidden_error))


class Unsupported(Exception):
    pass


class BackendCompilerFailed(Exception):
    pass


@pytest.mark.parametrize(
    "kwargs, status",
    [
        (
            dict(fullgraph=True, error=Unsupported("x"), graph_count=0, graph_breaks=0, correctness=None),
            "fullgraph_error",
        ),
        (
            dict(fullgraph=False, error=Unsupported("x"), graph_count=0, graph_breaks=0, correctness=None),
            "compile_error",
        ),
        (
            dict(fullgraph=True, error=BackendCompilerFailed("x"), graph_count=0, graph_breaks=0, correctness=None),
            "compile_error",
        ),
        (
            dict(fullgraph=False, error=None, graph_count=0, graph_breaks=1, correctness={"within_tolerance": True}),
            "eager_fallback",
        ),
        (
            dict(fullgraph=False, error=None, graph_count=2, graph_breaks=1, correctness={"within_tolerance": False}),
            "mismatch",
        ),
        (
            dict(fullgraph=False, error=None, graph_count=2, graph_breaks=1, correctness={"within_tolerance": True}),
            "graph_break",
        ),
        (
            dict(fullgraph=True, error=None, graph_count=1, graph_breaks=0, correctness={"within_tolerance": True}),
            "pass",
        ),
    ],
)
def test_classify(kwargs, status):
    assert classify(**kwargs) == status


def test_group_counts_duplicates_in_order():
    items = [{"key": "a", "at": 1}, {"key": "b", "at": 1}, {"key": "a", "at": 1}, {"key": "a", "at": 2}]
    assert [(g["key"], g["at"], g["count"]) for g in group(items, ("key", "at"))] == [
        ("a", 1, 2),
        ("b", 1, 1),
        ("a", 2, 1),
    ]


def _outcome(**kw) -> PassOutcome:
    base = dict(returncode=0, signal=None, timed_out=False, duration_s=1.0, stderr_tail="", records=[])
    return PassOutcome(**{**base, **kw})


def test_probe_failure_verdicts():
    assert probe_failure(_outcome(timed_out=True, returncode=-9))["status"] == "timeout"
    assert probe_failure(_outcome(returncode=-11, signal=11))["status"] == "crash"
    garbage = probe_failure(_outcome(returncode=0, unreadable_lines=3))
    assert garbage["status"] == "crash" and "3 unreadable" in garbage["error_message"]
    assert probe_failure(_outcome(records=[{"kind": "result", "status": "pass"}])) is None


class _NoBreaks:
    def of_kind(self, kind):
        return []


def test_graph_breaks_fall_back_to_dynamo_counters_when_the_log_has_none():
    """torch 2.1's graph_breaks log reports only WON'T CONVERT; its counters still count the breaks."""
    from diag.probe.findings import graph_breaks_from_counters

    counters = {
        "unimplemented": {"Dynamic slicing on data-dependent value is not supported": 1},
        "graph_break": {"call_function in skip_files": 2},
        "stats": {"unique_graphs": 10},
    }
    found = graph_breaks_from_counters(_NoBreaks(), counters)
    assert sorted((f["reason"], f["count"], f["resumable"]) for f in found) == [
        ("Dynamic slicing on data-dependent value is not supported", 1, False),
        ("call_function in skip_files", 2, True),
    ]
    assert all(f["key"].startswith("Unsupported:") for f in found)


def test_the_llama_helpers_name_the_transformers_they_need_on_an_older_one():
    """transformers 4.30's LlamaModel has no rotary_emb (each attention layer held its own): the helpers
    say which transformers they need instead of an AttributeError."""
    import torch
    import transformers

    from diag.probe import llama

    class Old4_30Layout(torch.nn.Module):  # LlamaForCausalLM as 4.30 laid it out: model without rotary_emb
        def __init__(self) -> None:
            super().__init__()
            self.model = torch.nn.Module()

    with pytest.raises(llama.OldTransformers, match=r"need transformers >= 4\.45 .*this environment has ") as caught:
        llama.prefill(Old4_30Layout(), torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))
    assert transformers.__version__ in str(caught.value) and "--with 'transformers>=4.45'" in str(caught.value)
