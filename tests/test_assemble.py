"""assemble, step by step, on run directories that real probes recorded (tests/fixtures/runs)."""

from __future__ import annotations

import json

import pytest
from conftest import RECORDED, recorded

from diag.probe import records, statuses
from diag.run import assemble, rundir

UNKNOWN_BUILD = {"torch_version": "unknown", "git_version": None, "cuda_version": None}

# name: status, graph breaks, recompiles, hidden errors, timed modes (what torch 2.13 gave when recorded)
EXPECTED = {
    "append_last-fullgraph": ("pass", 0, 0, 0, {"eager", "compiled"}),
    "append_last-no-fullgraph": ("pass", 0, 0, 0, {"eager", "compiled"}),
    "dynamic_slice-fullgraph": ("fullgraph_error", 0, 0, 0, {"eager"}),
    "dynamic_slice-no-fullgraph": ("graph_break", 2, 2, 1, {"eager", "compiled"}),
    "hf_static_cache-fullgraph": ("pass", 0, 0, 0, {"eager", "compiled"}),
    "hf_static_cache-no-fullgraph": ("pass", 0, 0, 0, {"eager", "compiled"}),
    "hf_dynamic_cache-fullgraph": ("pass", 0, 1, 0, {"eager", "compiled"}),
    "hf_dynamic_cache-no-fullgraph": ("pass", 0, 1, 0, {"eager", "compiled"}),
    "mismatch-fullgraph": ("mismatch", 0, 1, 0, {"eager", "compiled"}),
    "mismatch-no-fullgraph": ("mismatch", 0, 1, 0, {"eager", "compiled"}),
    "swallowed_error-fullgraph": ("eager_fallback", 16, 0, 16, {"eager", "compiled"}),
    "swallowed_error-no-fullgraph": ("eager_fallback", 16, 0, 16, {"eager", "compiled"}),
    "segfault": ("crash", None, None, None, set()),
    "garbage_exit": ("crash", None, None, None, set()),
    "hang": ("timeout", None, None, None, set()),
}


def test_every_recorded_run_directory_has_an_expectation():
    assert sorted(p.name for p in RECORDED.iterdir()) == sorted(EXPECTED)


def _assembled(name, tmp_path, **changes):
    files = rundir.load(recorded(name, tmp_path / "runs"))
    return assemble.assemble(files, UNKNOWN_BUILD, [], {})


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_run_assembles_to_its_status_counts_and_timings(name, tmp_path):
    status, breaks, recompiles, hidden, modes = EXPECTED[name]
    record = _assembled(name, tmp_path)
    run = record.run
    assert (run["status"], run["graph_break_count"], run["recompile_count"], run["hidden_error_count"]) == (
        status,
        breaks,
        recompiles,
        hidden,
    )
    assert {t["mode"] for t in record.timings} == modes
    # The one count: what is stored is the total of the rows, for every kind of finding.
    if breaks is not None:
        for kind in statuses.FINDING_KINDS:
            assert run[kind.count_column] == statuses.finding_total(getattr(record, kind.table))
    assert run["uid"] and run["artifacts_dir"].endswith(f"{name}-a")
    assert run["case_source"] == (
        "builtin"
        if name.split("-")[0] in ("append_last", "dynamic_slice", "hf_static_cache", "hf_dynamic_cache")
        else run["case_path"]
    )


def test_a_compile_failure_keeps_eager_timings_and_is_not_repeated_as_a_timing_error(tmp_path):
    run = _assembled("dynamic_slice-fullgraph", tmp_path).run
    assert run["eager_ms_per_token"] and run["compiled_ms_per_token"] is None
    assert run["timing_error"] is None
    assert run["error_type"] == "UserError" and "dynamic_slice.py:" in run["error_location"]


def test_crash_verdict_carries_signal_and_stderr_and_no_timings(tmp_path):
    run = _assembled("segfault", tmp_path).run
    assert (run["error_type"], run["signal"]) == ("Signal", 11)
    assert "about to crash" in run["stderr_tail"]
    assert run["eager_ms_per_token"] is None and run["timing_error"] is None


def test_a_probe_that_died_before_any_pass_ended_is_a_crash_with_its_own_exit(tmp_path):
    run_dir = recorded("append_last-fullgraph", tmp_path / "runs")
    for name in ("passes.jsonl", "diagnose.jsonl"):
        (run_dir / name).unlink()
    (run_dir / "probe.jsonl").write_text(
        json.dumps(records.make(records.EXIT, name="run", returncode=None, signal=9, timed_out=False, duration_s=3.0))
        + "\n"
    )
    record = assemble.assemble(rundir.load(run_dir), UNKNOWN_BUILD)
    assert (record.run["status"], record.run["signal"], record.run["graph_break_count"]) == ("crash", 9, None)
    assert record.build["version"] == "unknown" and record.timings == []


def test_verdict_steps_one_at_a_time(tmp_path):
    files = rundir.load(recorded("dynamic_slice-no-fullgraph", tmp_path / "runs"))
    verdict = assemble.verdict(files.diagnosis)
    assert verdict["status"] == "graph_break" and "graph_break_count" not in verdict
    assert json.loads(verdict["counters"])["stats"]["unique_graphs"] == verdict["graph_count"]
    found = assemble.findings(files.diagnosis)
    assert sorted(found) == ["graph_breaks", "hidden_errors", "recompiles"]
    assert all(row["location"] and row["key"] for row in found["graph_breaks"])
    capabilities = json.loads(assemble.capabilities(files.diagnosis, {"tlparse": {"available": False, "detail": "x"}}))
    assert capabilities["debug_logs"]["available"] is True and capabilities["tlparse"]["detail"] == "x"
    assert assemble.correctness(files.diagnosis)["oracle_equal"] == 1
    assert {row["metric"] for row in assemble.timing_rows(files.timing)} == {
        "decode_step",
        "between_step",
        "generation",
        "host_reference",
    }


def test_a_declared_result_field_reaches_its_column_by_name(tmp_path):
    """ops_captured was added as records.py field + collector + column: assemble needed no change."""
    assert _assembled("append_last-fullgraph", tmp_path).run["ops_captured"] > 0
    assert _assembled("dynamic_slice-fullgraph", tmp_path).run["ops_captured"] == 0  # fullgraph refused it all
    assert _assembled("segfault", tmp_path).run.get("ops_captured") is None


def test_recompiles_a_build_gave_no_means_to_see_are_unknown_not_zero(tmp_path):
    """A torch with neither a recompiles log nor dynamo's guard_failures: its runs' recompiles are
    unknown ('-'), where a build that can see them and saw none stores 0."""
    directory = recorded("append_last-no-fullgraph", tmp_path / "runs")
    lines = []
    for line in (directory / "diagnose.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["kind"] == records.CAPABILITIES:
            record["capabilities"]["recompiles_log"] = {"available": False, "detail": "neither on this torch"}
        lines.append(json.dumps(record))
    (directory / "diagnose.jsonl").write_text("\n".join(lines) + "\n")
    run = assemble.assemble(rundir.load(directory), UNKNOWN_BUILD, [], {}).run
    assert run["recompile_count"] is None and run["decode_recompiles"] is None
    assert run["graph_break_count"] == 0  # what the build could see is still counted
    assert _assembled("append_last-fullgraph", tmp_path).run["recompile_count"] == 0


def test_frames_without_a_trace_keep_their_failure_as_text(tmp_path):
    """A run whose trace is gone (or a torch before 2.3) takes its frames from torch's in-process
    metrics: a frame's long fail_reason (aot_eager's backend exception) is stored as text, its
    digest only in the frame's metrics JSON, and the run stores."""
    record = _assembled("dynamic_slice-no-fullgraph", tmp_path)
    (failed,) = [frame for frame in record.frames if frame["fail_type"]]
    assert isinstance(failed["fail_reason"], str) and "Backend compiler" in failed["fail_reason"]
    assert json.loads(failed["metrics"])["fail_reason"]["chars"] > 512
