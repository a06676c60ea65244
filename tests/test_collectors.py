"""Collectors that fail (tlparse missing, a trace that will not parse) are noted, never fatal."""

from __future__ import annotations

import json

from diag.run import trace


def _trace_dir(tmp_path, lines):
    directory = tmp_path / "trace"
    directory.mkdir()
    (directory / "dedicated_log_torch_trace_x.log").write_text("\n".join(lines) + "\n")
    return directory


METRICS = {
    "compilation_metrics": {
        "compile_id": "0/1",
        "co_name": "decode_step",
        "cache_size": 1,
        "guard_count": 12,
        "graph_op_count": 30,
        "graph_input_count": 6,
        "entire_frame_compile_time_s": 0.5,
        "fail_type": None,
        "restart_reasons": ["x"],
    }
}


def test_frames_are_read_and_corrupt_lines_skipped(tmp_path):
    directory = _trace_dir(
        tmp_path,
        [
            "V1130 08:50:47.248000 1 torch/_dynamo/utils.py:1 " + json.dumps(METRICS),
            'V1130 08:50:47.3 1 x.py:1 {"compilation_metrics": {"compile_id": "0/2", "co_name": ',  # torn write
            "\x00\xff garbage",
            'V1130 08:50:47.4 1 x.py:1 {"dynamo_start": {}}',
        ],
    )
    rows, (ok, detail) = trace.frames(directory)
    assert ok and "1 unreadable" in detail
    assert rows == [
        {**{f: METRICS["compilation_metrics"].get(f) for f in trace.FRAME_FIELDS}, "restart_reasons": '["x"]'}
    ]


def test_missing_trace_and_old_torch_are_notes(tmp_path):
    rows, (ok, detail) = trace.frames(tmp_path / "absent")
    assert rows == [] and not ok and "torch >= 2.3" in detail
    rows, (ok, detail) = trace.frames(_trace_dir(tmp_path, ['V1 x.py:1 {"dynamo_start": {}}']))
    assert rows == [] and not ok and "2.4" in detail


def test_tlparse_missing_is_a_note(tmp_path, monkeypatch):
    directory = _trace_dir(tmp_path, ["V1130 x.py:1 " + json.dumps(METRICS)])
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(trace.sys, "executable", str(tmp_path / "no-tlparse-here" / "python"))
    ok, detail = trace.render_tlparse(directory, tmp_path / "out")
    assert not ok and "tlparse is not installed" in detail


def test_tlparse_renders_a_real_trace(findings):
    run = findings[("append_last", True)]
    assert run["capabilities"]["tlparse"]["available"] is True, run["capabilities"]["tlparse"]
    assert "tlparse report" in run["artifacts"]
    assert run["artifacts"]["tlparse report"].endswith("tlparse/index.html")
    assert "depyf dump (decompiled bytecode, graphs)" in run["artifacts"]


def test_a_run_that_never_compiled_says_so_not_that_torch_lacks_a_trace(tmp_path):
    rows, notes = trace.collect(tmp_path, compiled=False)
    assert rows == []
    assert all(note["detail"] == "nothing was compiled, so no trace was written" for note in notes.values())
    assert "torch >= 2.3" not in json.dumps(notes)


def test_tlparse_is_found_beside_the_target_python_when_not_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    env_bin = tmp_path / "venv" / "bin"
    env_bin.mkdir(parents=True)
    tool = env_bin / "tlparse"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    monkeypatch.setattr(trace.sys, "executable", str(tmp_path / "orchestrator" / "python"))
    assert trace.find_tlparse(str(tmp_path / "elsewhere" / "python")) is None
    assert trace.find_tlparse(str(env_bin / "python")) == str(tool)
    monkeypatch.setattr(trace.sys, "executable", str(env_bin / "python"))
    assert trace.find_tlparse(None) == str(tool)
