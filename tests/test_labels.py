"""Labels that mean the same on every torch version: each parser fix, on the wording a real build logs.

Each message below is in the form the named torch version writes it (the version fixtures in
tests/fixtures/versions hold whole logs); a test fails if diag would label it differently
from what happened.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from diag import text
from diag.probe import capture, diagnose, findings, parsers, records, statuses
from diag.probe.parsers import Record
from diag.probe.record_types import Found

GB_LOG = "torch._dynamo.symbolic_convert.__graph_breaks"
VERSIONS = Path(__file__).parent / "fixtures" / "versions"


def _collect(*recs: Record) -> capture.LogCapture:
    collector = capture.LogCapture(__import__("pathlib").Path("/dev/null"), lambda: None)
    for rec in recs:
        collector.feed(rec)
    return collector


def _emitted(tmp_path, collector, counters=None, fullgraph=False, failed=False):
    path = tmp_path / "out.jsonl"
    with records.Writer(path) as writer:
        breaks = findings.emit_findings(writer, collector, [], counters or {}, failed_whole=fullgraph and failed)
    found, _ = records.read(path)
    return breaks, found


# torch 2.1: "Graph break: <reason> from user code at ..." once per unique location
BREAK_21 = (
    "Graph break: dynamic slicing on data-dependent value from user code at:\n"
    '  File "/w/cases/dynamic_slice.py", line 19, in decode_step\n    k = cache[:, :n]\n'
)


def test_counts_agree_with_dynamo_counters_when_the_log_deduplicates(tmp_path):
    """2.1 logged the slicing break once where the counters said 6, and not the ModelOutput one at all."""
    collector = _collect(Record(GB_LOG, "DEBUG", BREAK_21, None, 0))
    counters = {
        "graph_break": {
            "dynamic slicing on data-dependent value": 6,
            "call_method UserDefinedObjectVariable(ModelOutput) __setitem__": 2,
        }
    }
    breaks, _ = _emitted(tmp_path, collector, counters)
    assert statuses.finding_total(breaks) == 8
    by_reason = {b["reason"].splitlines()[0]: b["count"] for b in breaks}
    assert by_reason["Graph break: dynamic slicing on data-dependent value from user code at:"] == 6
    assert by_reason["call_method UserDefinedObjectVariable(ModelOutput) __setitem__"] == 2
    # where the log already counts every break, the counters' other wording adds nothing
    breaks, _ = _emitted(tmp_path, collector, {"graph_break": {"some other wording": 1}})
    assert statuses.finding_total(breaks) == 1


class Unsupported(Exception):
    pass


class UserError(Exception):
    pass


def _raised(exc):
    try:
        raise exc
    except Exception as caught:
        return parsers.LoggedException.of((type(caught), caught, caught.__traceback__))


def test_the_debug_traceback_behind_a_break_is_not_also_a_hidden_error():
    record = Record(
        "torch._dynamo.symbolic_convert",
        "DEBUG",
        "break_graph_if_unsupported triggered compile",
        _raised(Unsupported("dynamic slicing on data-dependent value")),
        0,
    )
    assert parsers.parse_hidden_error(record) is None
    text = (
        "Restarting analysis due to ...\nTraceback (most recent call last):\n"
        '  File "/x/torch/_dynamo/symbolic_convert.py", line 1, in f\n'
        "torch._dynamo.exc.Unsupported: dynamic slicing on data-dependent value\n"
    )
    assert parsers.parse_hidden_error(Record("torch._dynamo.symbolic_convert", "DEBUG", text, None, 0)) is None
    # a swallowed error of another type stays one
    swallowed = Record("torch._dynamo.convert_frame", "DEBUG", "x", _raised(TypeError("guards")), 0)
    assert parsers.parse_hidden_error(swallowed).data["exc_type"] == "TypeError"


def test_a_21_tuple_recompile_record_reads_as_its_lines():
    """torch 2.1 logs ("Recompiling function f in file:line", "triggered by ... failure: <guard>")."""
    log_record = logging.LogRecord(
        "torch._dynamo.guards.__recompiles",
        logging.DEBUG,
        __file__,
        1,
        (
            "Recompiling function forward in /w/model.py:40",
            "triggered by the following guard failure: L['x'].size()[1] == 9",
        ),
        None,
        None,
    )
    collector = capture.LogCapture(__import__("pathlib").Path("/dev/null"), lambda: 3)
    collector.emit(log_record)
    found = collector.of_kind("recompile")[0]
    assert found["reason"] == "L['x'].size()[1] == 9"
    assert found["function"] == "forward" and found["location"] == "/w/model.py:40"
    assert found["guard_failures"] == 1


def test_verbose_recompile_counts_cache_entries_not_stack_lines():
    """2.13's recompiles_verbose puts a user stack under each guard; the count is of guards."""
    entries = []
    for index in range(3, -1, -1):
        entries.append(
            f"    - {index}/{index}: tensor 'x' size mismatch at index 1. expected {index + 8}, actual 13\n"
            "      User stack trace:\n"
            '      - File "/w/model.py", line 40, in forward\n'
            '      - File "/w/model.py", line 52, in attention\n'
        )
    text = "Recompiling function forward in /w/model.py:40\n    triggered by the following guard failure(s):\n"
    finding = parsers.parse_recompile(
        Record("torch._dynamo.guards.__recompiles_verbose", "DEBUG", text + "".join(entries), None, 4)
    )
    assert finding.data["guard_failures"] == 4
    assert finding.data["reason"].startswith("tensor 'x' size mismatch") and "expected 11" in finding.data["reason"]


def test_failed_to_handle_graph_break_gracefully_is_not_resumable():
    text = (
        "Graph break in user code at /w/cases/x.py:12\nGraph Break Reason: Failed to handle graph break "
        "gracefully. Skipping the function and falling back to eager. Graph break encountered:\n\n"
        "Data-dependent branching\n  Explanation: ...\n"
    )
    finding = parsers.parse_graph_break(Record(GB_LOG, "DEBUG", text, None, 1))
    assert finding.data["resumable"] is False
    assert parsers.parse_hidden_error(Record(GB_LOG, "DEBUG", text, None, 1)).data["source"] == "frame_fallback"


WONT = (
    "WON'T CONVERT forward /w/model.py line 40\ndue to:\nTraceback (most recent call last):\n"
    '  File "/x/torch/_dynamo/convert_frame.py", line 1, in f\n'
    "TypeError: VariableBuilder.__init__() got an unexpected keyword argument 'guards'\n"
)


def test_one_wont_convert_on_two_loggers_is_one_hidden_error(tmp_path):
    collector = _collect(
        Record("torch._dynamo.convert_frame", "WARNING", WONT, None, 0),
        Record("torch._dynamo.convert_frame.__graph_breaks", "DEBUG", WONT, None, 0),
    )
    _, found = _emitted(tmp_path, collector)
    hidden = Found(found).all(records.HIDDEN_ERROR)
    assert len(hidden) == 1 and hidden[0]["count"] == 1


LIMIT = (
    "torch._dynamo hit config.recompile_limit (8)\n   function: 'forward' (/w/model.py:40)\n"
    "   last reason: 0/7: tensor 'x' size mismatch at index 1. expected 15, actual 16\n"
)


def test_the_refused_compile_is_not_a_recompile_and_the_fallback_is_its_own_finding():
    recompiles = [
        Record(
            "torch._dynamo.guards.__recompiles",
            "DEBUG",
            f"Recompiling function forward in /w/model.py:40\n    triggered by the following guard "
            f"failure(s):\n    - 0/{n}: tensor 'x' size mismatch\n",
            None,
            n,
        )
        for n in range(8)
    ]
    collector = _collect(*recompiles, Record("torch._dynamo.convert_frame", "WARNING", LIMIT, None, 8))
    assert len(collector.of_kind("recompile")) == 7
    hidden = collector.of_kind("hidden_error")
    assert [h["source"] for h in hidden] == [parsers.RECOMPILE_LIMIT]
    assert hidden[0]["location"] == "/w/model.py:40" and "recompile limit (8)" in hidden[0]["message"]
    # with fullgraph the refused compile raises: it is the run's error, and its message names the limit
    assert findings.hidden_errors(hidden, failed_whole=True) == []
    said = diagnose._with_recompile_limit("Hard failure due to fullgraph=True", collector)
    assert said == "Hard failure due to fullgraph=True: recompile limit (8) hit for forward"


def test_one_given_up_frame_named_by_three_loggers_is_one_hidden_error():
    """torch 2.13, aot_eager: the backend's DataDependentOutputException on the graph-break log,
    convert_frame's WON'T CONVERT carrying torch's "Backend compiler exception" around it, and the
    recompile-limit warning beside its fallback each name the frame they gave up on, at its line in
    one decode step: one event each, kept as the record that says most."""
    frame = "/w/case.py line 15"
    wrapped = "WON'T CONVERT decode_step " + frame + "\nTraceback (most recent call last):\n"
    records_ = [
        Record(GB_LOG, "DEBUG", wrapped + "DataDependentOutputException: aten._local_scalar_dense.default\n", None, 0),
        Record(
            "torch._dynamo.convert_frame",
            "INFO",
            wrapped + "torch._dynamo.exc.Unsupported: Backend compiler exception\n",
            None,
            0,
        ),
        # the same frame given up again at the next decode step is a second event
        Record(
            "torch._dynamo.convert_frame",
            "INFO",
            wrapped + "torch._dynamo.exc.Unsupported: Backend compiler exception\n",
            None,
            1,
        ),
    ]
    hidden = findings.hidden_errors(_collect(*records_).of_kind("hidden_error"))
    assert [(h["exc_type"], h["location"], h["count"]) for h in hidden] == [
        ("DataDependentOutputException", "/w/case.py:15", 1),
        ("Unsupported", "/w/case.py:15", 1),
    ]
    limit = Record("torch._dynamo.convert_frame", "WARNING", LIMIT, None, 8)
    refused = Record(
        "torch._dynamo.convert_frame",
        "INFO",
        "WON'T CONVERT forward /w/model.py line 40\n"
        "Traceback (most recent call last):\ntorch._dynamo.exc.Unsupported: Dynamo recompile limit exceeded\n",
        None,
        8,
    )
    hidden = findings.hidden_errors(_collect(refused, limit).of_kind("hidden_error"))
    assert [h["source"] for h in hidden] == [parsers.RECOMPILE_LIMIT]


class FailOnRecompileLimitHit(Exception):
    pass


def test_fullgraph_failures_have_no_breaks_whatever_the_error_type(tmp_path):
    collector = _collect(Record(GB_LOG, "DEBUG", BREAK_21, None, 0))
    counters = {"graph_break": {"dynamic slicing on data-dependent value": 1}}
    for error in (Unsupported("x"), UserError("y")):
        breaks, _ = _emitted(tmp_path, collector, counters, fullgraph=True, failed=True)
        assert breaks == []
        assert (
            diagnose.classify(fullgraph=True, error=error, graph_count=0, graph_breaks=0, correctness=None)
            == statuses.FULLGRAPH_ERROR
        )
    assert (
        diagnose.classify(
            fullgraph=True, error=FailOnRecompileLimitHit("limit"), graph_count=1, graph_breaks=0, correctness=None
        )
        == statuses.FULLGRAPH_ERROR
    )


BREAK_213 = (
    "Graph break in user code at /w/cases/dynamic_slice.py:19\n"
    "Graph Break Reason: Encountered graph break when attempting to trace CALL: a call to a function "
    "`decode_step`\n\nUnsupported Tensor.item() call with capture_scalar_outputs=False\n"
    "  Explanation: Dynamo does not support tracing `Tensor.item()` with capture_scalar_outputs=False.\n"
    "  Hint: Set `torch._dynamo.config.capture_scalar_outputs = True`\n"
)


def test_gb_type_of_213s_call_wording_is_the_real_reason():
    finding = parsers.parse_graph_break(Record(GB_LOG, "DEBUG", BREAK_213, None, 0))
    assert finding.data["gb_type"] == "Unsupported Tensor.item() call with capture_scalar_outputs=False"
    assert finding.data["key"] == "gb_type:Unsupported Tensor.item() call with capture_scalar_outputs=False"


def test_locations_prefer_user_frames_over_torch_files():
    text = (
        "Graph break in user code at /venv/lib/python3.11/site-packages/torch/_library/custom_ops.py:863\n"
        "Graph Break Reason: unsupported\nUser code traceback:\n"
        '  File "/w/cases/append_last.py", line 30, in decode_step\n'
        '  File "/venv/lib/python3.11/site-packages/torch/_library/custom_ops.py", line 863, in __call__\n'
    )
    finding = parsers.parse_graph_break(Record(GB_LOG, "DEBUG", text, None, 0))
    assert finding.data["location"] == "/w/cases/append_last.py:30"
    # a logged exception's traceback gives its frame
    hidden = parsers.parse_hidden_error(
        Record("torch._inductor.x", "DEBUG", "lowering failed", _raised(RuntimeError("boom")), 0)
    )
    assert hidden.data["location"] is not None and hidden.data["location"].endswith(
        "test_labels.py:" + hidden.data["location"].rsplit(":", 1)[1]
    )


def test_tracebacks_in_a_pass_stderr():
    text = (
        "W1201 warning line\n[2023-06-21] torch._dynamo.convert_frame: [ERROR] WON'T CONVERT forward\n"
        + WONT.split("due to:\n", 1)[1]
        + "more output\n"
    )
    found = parsers.errors_in_stderr(text)
    assert [(f["exc_type"], f["message"]) for f in found] == [
        ("TypeError", "VariableBuilder.__init__() got an unexpected keyword argument 'guards'")
    ]


@pytest.mark.parametrize("message", [BREAK_21, BREAK_213, WONT, LIMIT])
def test_replayed_log_gives_what_the_live_capture_gave(message, tmp_path):
    """The version fixtures are replayed from the debug log; a record read back parses as it did live."""
    log = tmp_path / "torch_debug.log"
    live = capture.LogCapture(log, lambda: 5)
    live.install()
    logging.getLogger(GB_LOG).debug(message)
    live.uninstall()
    replayed = capture.replay(log.read_text())
    assert [(f.kind, f.data["key"]) for f in replayed.findings] == [(f.kind, f.data["key"]) for f in live.findings]
    assert all(f.data["decode_step"] == 5 for f in replayed.findings)


class UncapturedHigherOrderOpError(Unsupported):
    """A subclass of Unsupported under its own name, as torch has several."""


class BackendCompilerFailed(Exception):
    def __init__(self, inner):
        super().__init__(f"backend='inductor' raised:\n{type(inner).__name__}: {inner}")
        self.inner_exception = inner


def _nested():
    try:
        raise KeyError("missing buffer")
    except KeyError as inner:
        raise BackendCompilerFailed(inner) from inner


@pytest.mark.parametrize(
    "raise_it",
    [lambda: (_ for _ in ()).throw(UncapturedHigherOrderOpError("cond branch")), _nested],
    ids=["unsupported-subclass", "wrapped-backend-error"],
)
def test_a_logged_exception_object_replays_as_it_parsed_live(raise_it, tmp_path):
    """A record logged with an exception object (exc_info): the live parsers read the object
    (its class's ancestry, the error inside a backend wrapper); the log keeps what they read, so a
    replay classifies it the same (torch 2.3/2.4's frame fallbacks moved between keys before)."""
    log = tmp_path / "torch_debug.log"
    live = capture.LogCapture(log, lambda: 2)
    live.install()
    try:
        raise_it()
    except Exception:
        logging.getLogger("torch._dynamo.convert_frame").debug("Restarting analysis", exc_info=True)
    live.uninstall()
    replayed = capture.replay(log.read_text())
    assert [(f.kind, f.data["key"], f.data["exc_type"], f.data["location"]) for f in replayed.findings] == [
        (f.kind, f.data["key"], f.data["exc_type"], f.data["location"]) for f in live.findings
    ]
    # the human-readable traceback stays in the log
    assert "Traceback (most recent call last)" in log.read_text()


@pytest.mark.slow
def test_a_torch_without_set_logs_still_completes_and_names_what_is_missing(tmp_path):
    """Real probe runs: torch with set_logs and the bytecode hook removed (what 2.0 lacked), and a case
    whose eager tokens disagree with transformers (the error names both sequences)."""
    from conftest import REPO, diag, runs_by_case

    cases = REPO / "tests" / "cases"
    db = tmp_path / "labels.db"
    diag(
        "run",
        "--case",
        str(cases / "old_torch.py"),
        "--case",
        str(cases / "wrong_eager.py"),
        "--no-fullgraph",
        "--backend",
        "eager",
        "--new-tokens",
        "4",
        "--prompt-length",
        "8",
        "--repeats",
        "1",
        "--timing-seconds",
        "0",
        "--db",
        str(db),
        cwd=tmp_path,
    )
    runs = runs_by_case(db, tmp_path)
    old = runs[("old_torch", False)]
    assert old["status"] == statuses.GRAPH_BREAK, old.get("error_message")
    missing = {name for name, value in old["capabilities"].items() if not value["available"]}
    assert {"debug_logs", "graph_breaks_log", "depyf"} <= missing
    # no recompiles log, but dynamo's guard_failures (as on 2.0): the recompiles are its failures
    assert "guard_failures" in old["capabilities"]["recompiles_log"]["detail"]
    assert old["recompile_count"] == sum(old["counters"]["guard_failures"].values()) > 0
    unimplemented = old["counters"]["unimplemented"]
    assert old["graph_break_count"] >= 1 and sum(unimplemented.values()) == old["graph_break_count"]
    wrong = runs[("wrong_eager", False)]
    assert wrong["status"] == statuses.EAGER_ERROR and wrong["error_type"] == "OracleMismatch"
    assert wrong["error_message"].count("[[") == 2  # the case's tokens and transformers' tokens


@pytest.mark.slow
def test_a_run_whose_diagnosis_died_keeps_what_the_timing_pass_learned(tmp_path):
    from conftest import REPO, diag, run_section, runs_by_case

    db = tmp_path / "evidence.db"
    diag(
        "run",
        "--case",
        str(REPO / "tests" / "cases" / "dies_in_diagnosis.py"),
        "--fullgraph",
        "--backend",
        "eager",
        "--new-tokens",
        "3",
        "--prompt-length",
        "8",
        "--repeats",
        "1",
        "--timing-seconds",
        "0",
        "--db",
        str(db),
        cwd=tmp_path,
    )
    run = runs_by_case(db, tmp_path)[("dies_in_diagnosis", True)]
    assert run["status"] == statuses.CRASH
    assert run["timing_error"].startswith("timing pass: RuntimeError: arg mismatch inlining (at ")
    assert "dies_in_diagnosis.py:" in run["timing_error"]
    kept = [h for h in run["hidden_errors"] if h["source"] == "timing_pass"]
    assert [(h["exc_type"], h["message"]) for h in kept] == [
        ("TypeError", "VariableBuilder.__init__() got an unexpected keyword argument 'guards'"),
        ("RuntimeError", "arg mismatch inlining"),
    ]
    assert run["hidden_error_count"] == 2 and run["graph_break_count"] is None
    shown = diag("show", str(run["id"]), "--db", str(db), cwd=tmp_path).stdout
    assert "timing pass: RuntimeError: arg mismatch inlining" in shown
    assert "[timing_pass] TypeError: VariableBuilder.__init__() got an unexpected keyword argument 'guards'" in shown
    diag("report", "--db", str(db), "--out", str(tmp_path / "site"), cwd=tmp_path)
    page = run_section(tmp_path / "site", run["id"])
    assert "timing_pass" in page and "unexpected keyword argument &#39;guards&#39;" in page


# torch 2.0.1, verbatim but for the path and address: dynamo's own warning when binding a call it
# inlines fails; it then reports only "arg mismatch inlining".
INLINE_20 = (
    "/w/cases/default_tensor_arg.py <function scaled_step at 0x7f9c6ff52e60> [NNModuleVariable(), "
    "TensorVariable(), TensorVariable(), ListVariable(), ListVariable(), TensorVariable()] {} "
    "VariableBuilder.__init__() got an unexpected keyword argument 'guards'"
)


def test_the_20_inline_binding_error_is_a_hidden_typeerror_in_the_log_and_in_stderr():
    found = parsers.parse_hidden_error(Record("torch._dynamo.symbolic_convert", "WARNING", INLINE_20, None, 0))
    assert (found.data["exc_type"], found.data["source"]) == ("TypeError", "swallowed_exception")
    assert "unexpected keyword argument 'guards'" in found.data["message"]
    assert "scaled_step" in found.data["message"] and "arg mismatch inlining" in found.data["message"]
    stderr = f"[2026-12-01 06:29:20,562] torch._dynamo.symbolic_convert: [WARNING] {INLINE_20}\nother output\n"
    (seen,) = parsers.errors_in_stderr(stderr)
    assert seen["exc_type"] == "TypeError" and seen["message"] == found.data["message"]


def _wont_convert_222() -> str:
    """torch 2.2.2's WON'T CONVERT record of a frame it skipped whole (from the 2.2.2 fixture of
    hf_dynamic_cache): the only trace of the skip in the log; dynamo's counters count it as
    ``unimplemented`` and log no graph break for it."""
    log = (VERSIONS / "2.2.2+cu121" / "hf_dynamic_cache-no-fullgraph" / "torch_debug.log").read_text()
    lines = log.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if "WON'T CONVERT <dictcomp>" in line)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("[step "))
    return "".join(lines[start:end])


def test_a_skipped_frame_torch_only_counted_is_one_located_break_and_says_why(tmp_path):
    """The frame is skipped whole: no graph-break record, a frame fallback in the log, one
    ``unimplemented`` count. One break (not one from the counter and one from the fallback), at the
    line the fallback names; and the run does not claim the build lacks a graph-break log."""
    collector = capture.replay(_wont_convert_222())
    counters = {"unimplemented": {"FOR_ITER UserDefinedObjectVariable(dict_keyiterator)": 1}}
    extra = findings.graph_breaks_from_counters(collector, counters)
    path = tmp_path / "out.jsonl"
    with records.Writer(path) as writer:
        breaks = findings.emit_findings(writer, collector, extra, {})
    assert statuses.finding_total(breaks) == 1, breaks
    (only,) = breaks
    assert only["location"].endswith("transformers/utils/generic.py:985") and only["resumable"] is False
    found, _ = records.read(path)
    assert [h["source"] for h in Found(found).all(records.HIDDEN_ERROR)] == ["frame_fallback"]
    note = findings.counted_breaks_note(has_log=True)
    assert note["name"] != "graph_breaks_log" and note["available"] is True
    assert findings.counted_breaks_note(has_log=False)["name"] == "graph_breaks_log"


def test_counted_breaks_take_their_place_from_a_record_that_says_them():
    """Where the log and the counters disagree, a counted message is placed by a record whose words
    contain it, never by one with no words at all (an empty first line is in every message)."""
    wordless = {"key": "k0", "reason": " ", "gb_type": None, "location": "a.py:1", "resumable": True, "count": 1}
    said = {"key": "k1", "reason": "Unsupported X\nmore", "gb_type": None, "location": "b.py:2", "resumable": True}
    rows = findings.as_torch_counted([wordless, {**said, "count": 1}], {"graph_break": {"Unsupported X": 3}})
    assert [(r["key"], r["location"], r["count"]) for r in rows] == [("k1", "b.py:2", 3)]


def test_a_resume_function_recompiled_has_its_function_and_line():
    """torch names the rest of a frame after a graph break "<graph break in forward>" (2.0 and 2.1
    logs): the recompile keeps that name and the line, not nothing."""
    record = Record(
        "torch._dynamo.guards.__recompiles",
        "DEBUG",
        "Recompiling function <graph break in forward> in /v/transformers/models/llama/modeling_llama.py:571\n"
        "    triggered by the following guard failure: tensor 'L['x']' size mismatch at index 1. expected 9, actual 10",
        None,
        1,
    )
    (found,) = _collect(record).of_kind("recompile")
    assert found["function"] == "<graph break in forward>"
    assert found["location"] == "/v/transformers/models/llama/modeling_llama.py:571"


def test_an_architecture_sweep_error_is_placed_in_the_model_not_in_diags_harness():
    """hf:<model_type> runs every architecture through diag/cases/_hf_arch.py: an exception raised
    from compiled code without dynamo's user stack is placed at the model's line."""
    model = "/v/lib/python3.11/site-packages/transformers/models/recurrent_gemma/modeling_recurrent_gemma.py"
    traceback = (
        'Traceback (most recent call last):\n  File "/r/diag/probe/diagnose.py", line 10, in run\n'
        '  File "/r/diag/cases/_hf_arch.py", line 14, in generate\n'
        f'  File "{model}", line 300, in forward\n'
        '  File "/v/lib/python3.11/site-packages/torch/_dynamo/eval_frame.py", line 5, in _fn\n'
    )
    assert parsers.innermost_user_frame(traceback, prefer="/r/diag/cases/_hf_arch.py") == f"{model}:300"
    # a case of the user's own keeps its line, as before
    own = traceback.replace("/r/diag/cases/_hf_arch.py", "/u/my_case.py")
    assert parsers.innermost_user_frame(own, prefer="/u/my_case.py") == "/u/my_case.py:14"


def test_a_grouped_break_keeps_the_span_of_decode_steps_its_events_happened_at():
    """One break (one key, line and handling) at the prefill and again at decode step 1 is one row of
    count 2 that says both steps, not step 0 alone."""
    records_ = [Record(GB_LOG, "DEBUG", BREAK_21, None, step) for step in (0, 1)]
    found = findings.group(_collect(*records_).of_kind("graph_break"), ("key", "location", "resumable"))
    assert [(b["count"], b["decode_step"], b["last_decode_step"]) for b in found] == [(2, 0, 1)]
    shown = text._steps(found[0])
    assert shown == " steps 0-1"
