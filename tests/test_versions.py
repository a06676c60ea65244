"""Every torch version's captured logs, replayed through today's parsers (no torch install needed).

tests/fixtures/versions holds, per torch build from 2.0 to today and per built-in case with
fullgraph on and off, the DEBUG log records that became findings, the diagnosis pass's
records, and the structured trace (python tests/fixtures/versions.py makes them from
bench/versions.py's run). A parser change is checked here against every version.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from diag.probe import capture, findings, records, statuses
from diag.probe.record_types import Found
from diag.run import trace

VERSIONS = Path(__file__).parent / "fixtures" / "versions"
RUNS = sorted(p.parent for p in VERSIONS.glob("*/*/diagnose.jsonl"))
COVERAGE = json.loads((VERSIONS / "coverage.json").read_text()) if (VERSIONS / "coverage.json").exists() else []


def _id(run: Path) -> str:
    return f"{run.parent.name}/{run.name}"


# Disagreements these checks find and diag does not explain yet: each is marked, strictly (the test
# fails once it passes, so the mark goes with the fix), with what was seen. None today.
KNOWN: dict[str, set[str]] = {"replay": set(), "labels": set(), "tlparse": set(), "counters": set()}
REASONS = {"replay": "", "labels": "", "tlparse": "", "counters": ""}


def _params(runs: list[Path], check: str) -> list:
    return [
        pytest.param(run, id=_id(run), marks=pytest.mark.xfail(strict=True, reason=REASONS[check]))
        if _id(run) in KNOWN[check]
        else pytest.param(run, id=_id(run))
        for run in runs
    ]


def _stored(run: Path) -> list[dict]:
    return records.read(run / "diagnose.jsonl")[0]


def _replayed(run: Path, tmp_path: Path) -> list[dict]:
    """The findings today's parsers make of the run's debug log, emitted the way the probe emits them."""
    stored = _stored(run)
    result = Found(stored).first(records.RESULT) or {}
    log = run / "torch_debug.log"
    collector = capture.replay(log.read_text(encoding="utf-8") if log.exists() else "")
    fullgraph = run.name.endswith("-fullgraph") and not run.name.endswith("no-fullgraph")
    counters = result.get("counters") or {}
    failed = result.get("error_type") is not None
    extra = [] if fullgraph else findings.graph_breaks_from_counters(collector, counters)
    out = tmp_path / f"{run.parent.name}-{run.name}.jsonl"
    with records.Writer(out) as writer:
        findings.emit_findings(writer, collector, extra, counters, failed_whole=fullgraph and failed, error=result)
    return records.read(out)[0]


def _summary(found: list[dict]) -> list[tuple]:
    kinds = [k.record for k in statuses.FINDING_KINDS]
    return sorted((r["kind"], r["key"], r.get("location"), r.get("count", 1)) for r in found if r["kind"] in kinds)


def test_fixtures_cover_every_minor_from_20():
    minors = {re.match(r"(\d+\.\d+)", entry["spec"])[1] for entry in COVERAGE}
    assert {f"2.{n}" for n in range(0, 16)} <= minors
    assert len(RUNS) >= 8 * 10


@pytest.mark.parametrize("run", _params(RUNS, "replay"))
def test_replay_gives_the_stored_findings(run, tmp_path):
    assert _summary(_replayed(run, tmp_path)) == _summary(_stored(run))


@pytest.mark.parametrize("run", _params(RUNS, "labels"))
def test_labels_hold_on_every_version(run):
    stored = _stored(run)
    result = Found(stored).first(records.RESULT)
    if result is None:
        return
    breaks = Found(stored).all(records.GRAPH_BREAK)
    hidden = Found(stored).all(records.HIDDEN_ERROR)
    recompiles = Found(stored).all(records.RECOMPILE)
    counters = result.get("counters") or {}
    # a break is a break, not also a swallowed error
    assert not [h for h in hidden if h["source"] == "swallowed_exception" and h["exc_type"] == "Unsupported"]
    # counts agree with dynamo's counters whenever both exist
    counted = sum((counters.get("graph_break") or {}).values())
    if counted and not result["status"] == statuses.FULLGRAPH_ERROR:
        assert statuses.finding_total(breaks) >= counted
    # a fullgraph failure has no breaks, whatever the error's type
    if result["status"] == statuses.FULLGRAPH_ERROR:
        assert breaks == []
    for item in recompiles:
        assert item["function"] and item["location"] and not item["reason"].startswith("(")
        assert item["guard_failures"] >= 1
    for item in breaks + hidden + recompiles:
        assert "None:" not in (item.get("location") or ""), item
    # a break is located at the user's line; a frame that fell back or recompiled may be torch's
    # own function (transformers calls torch.vmap, whose wrapper dynamo compiles), and is located there
    for item in breaks:
        if item.get("gb_type") != "frame fallback":
            assert "/torch/" not in (item.get("location") or ""), item


@pytest.mark.parametrize("run", _params(RUNS, "counters"))
def test_breaks_agree_with_torchs_counters_per_category(run, tmp_path):
    """Graph breaks as today's parsers make them of each version's log, against torch's own counts:
    every break dynamo resumed from (``graph_break``) and every one it could not (``unimplemented``,
    a frame skipped or cut short), in total and in distinct messages. Equal, not at least: a break
    counted twice fails here."""
    result = Found(_stored(run)).first(records.RESULT)
    if result is None or result["status"] == statuses.FULLGRAPH_ERROR:
        return  # a fullgraph failure has no breaks (test_labels_hold_on_every_version)
    counters = result.get("counters") or {}
    resumed, cut = counters.get("graph_break") or {}, counters.get("unimplemented") or {}
    breaks = Found(_replayed(run, tmp_path)).all(records.GRAPH_BREAK)
    assert statuses.finding_total(breaks) == sum(resumed.values()) + sum(cut.values())
    # a row per message and per way torch handled it (one message can be both resumed and not), split
    # where torch's log ended a graph for it at several places (tests/test_where_and_when.py)
    assert len({(bool(gb["resumable"]), gb["key"], gb["reason"]) for gb in breaks}) == len(resumed) + len(cut)
    # and per kind: the rows marked resumed are what torch resumed from, the others what it could not
    by_kind = {
        kind: statuses.finding_total([gb for gb in breaks if bool(gb["resumable"]) == kind]) for kind in (True, False)
    }
    assert by_kind == {True: sum(resumed.values()), False: sum(cut.values())}, breaks


RAISED = (statuses.COMPILE_ERROR, statuses.FULLGRAPH_ERROR)


@pytest.mark.parametrize("run", _params(RUNS, "counters"))
def test_hidden_errors_are_the_frames_torch_gave_up_on(run, tmp_path):
    """Hidden errors as today's parsers make them of each version's log, against torch's ``frames``
    counter: the frames it gave up on (total - ok) are the hidden errors of a given-up frame, one per
    frame however many of its loggers named it; where the run raised, that frame is the run's error.
    A break dynamo compiled up to and ran the rest of eagerly is a break, not a hidden error."""
    result = Found(_stored(run)).first(records.RESULT)
    frames = ((result or {}).get("counters") or {}).get("frames")
    replayed = _replayed(run, tmp_path)
    hidden = Found(replayed).all(records.HIDDEN_ERROR)
    assert not [h for h in hidden if "Compiling up to the previous resumable state" in (h.get("traceback") or "")]
    if not frames:
        return
    given_up = frames.get("total", 0) - frames.get("ok", 0)
    gave = statuses.finding_total([h for h in hidden if h["source"] in findings.GAVE_UP])
    if result["status"] in RAISED:
        assert given_up - 1 <= gave <= given_up, (gave, frames, hidden)
    else:
        assert gave == given_up, (gave, frames, hidden)


@pytest.mark.parametrize("run", [run for run in RUNS if run.parent.name.startswith("2.0.")], ids=_id)
def test_on_torch_20_the_recompiles_are_torchs_guard_failures(run, tmp_path):
    """torch 2.0 has no recompiles log: each guard failure dynamo keeps (``guard_failures``, per
    function; its count is stored with the counters) is a recompile, in the decode step it happened
    at, with the function and its line; a run that compiled never reads as 0 recompiles by default."""
    result = Found(_stored(run)).first(records.RESULT)
    if result is None or result["status"] == statuses.FULLGRAPH_ERROR:
        return
    counted = (result.get("counters") or {}).get("guard_failures") or {}
    recompiles = Found(_replayed(run, tmp_path)).all(records.RECOMPILE)
    assert statuses.finding_total(recompiles) == sum(counted.values())
    by_function: dict[str, int] = {}
    for item in recompiles:
        assert item["function"] and item["location"] and item["decode_step"] is not None, item
        key = f"{item['function']} {item['location']}"
        by_function[key] = by_function.get(key, 0) + (item.get("count") or 1)
    assert by_function == counted


def test_torch_20_recompiles_are_counted_on_the_cases_that_recompile():
    """Where 2.0's counter says the decode step recompiled, the fixtures hold its recompiles (the
    sliced cache's growing length, transformers' resume functions named "<graph break in forward>")."""
    counted = {
        run.name: sum(
            ((Found(_stored(run)).first(records.RESULT) or {}).get("counters") or {}).get("guard_failures", {}).values()
        )
        for run in RUNS
        if run.parent.name.startswith("2.0.")
    }
    assert counted["dynamic_slice-no-fullgraph"] > 0 and counted["hf_dynamic_cache-no-fullgraph"] > 0, counted


TRACED = [run for run in RUNS if (run / "trace.log").exists()]
TRACED_WITH_COUNTERS = [
    run for run in TRACED if ((Found(_stored(run)).first(records.RESULT) or {}).get("counters") or {}).get("frames")
]


@pytest.mark.parametrize("run", TRACED_WITH_COUNTERS, ids=_id)
def test_frames_compiled_and_skipped_agree_with_torchs_frame_counters(run, tmp_path):
    """The frames diag stores (one per compilation_metrics record of the trace, torch >= 2.4)
    against dynamo's ``frames`` counters: every frame torch gave up on (total - ok) is a stored frame
    with a fail type, and the frames stored as compiled are among those torch counts ok (it also
    counts ok a frame it converted without compiling a graph, which leaves no metrics)."""
    directory = tmp_path / "trace"
    directory.mkdir()
    shutil.copy(run / "trace.log", directory / "trace.log")
    rows, (has_metrics, why) = trace.frames(directory)
    counted = (Found(_stored(run)).first(records.RESULT) or {}).get("counters", {}).get("frames", {})
    if not has_metrics:
        assert run.parent.name.startswith("2.3."), why  # the trace has compilation metrics from 2.4 on
        return
    failed = [row for row in rows if row["fail_type"]]
    assert len(failed) == counted.get("total", 0) - counted.get("ok", 0), (failed, counted)
    assert len(rows) - len(failed) <= counted.get("ok", 0), (len(rows), counted)


TORCH_20 = [run for run in RUNS if run.parent.name.startswith("2.0.")]


@pytest.mark.parametrize("run", TORCH_20, ids=_id)
def test_on_torch_20_each_counted_break_is_placed_where_its_log_names_the_users_line(run, tmp_path):
    """torch 2.0 has no graph-break log: the breaks come from dynamo's counters, without a location.
    Its DEBUG log still names, where a graph ended at a break, the reason and the user frames
    ("COMPILING GRAPH due to GraphCompileReason(reason=..., user_stack=[...])"): every break is
    placed there, at a file that is not torch's own."""
    breaks = Found(_replayed(run, tmp_path)).all(records.GRAPH_BREAK)
    for item in breaks:
        assert item["location"] and "/torch/" not in item["location"], item
        assert item["decode_step"] is not None, item


def _tlparse_ids(out: Path) -> set[str]:
    directory = json.loads((out / "compile_directory.json").read_text())
    ids = set()
    for name in directory:
        found = re.match(r"\[(\d+)/(\d+)", name)
        if found:
            ids.add(f"{found[1]}/{found[2]}")
    return ids


def _trace_compiles(trace_log: Path) -> dict[tuple[int, int], dict]:
    """Per (frame id, frame compile id) in a TORCH_TRACE log: the compiled function's name and the
    frame's cache size when it compiled (from compilation_metrics, torch >= 2.4; None before)."""
    found: dict[tuple[int, int], dict] = {}
    for line in trace_log.read_text(encoding="utf-8").splitlines():
        start = line.find("{")
        if start < 0:
            continue
        try:
            envelope = json.loads(line[start:])
        except json.JSONDecodeError:
            continue
        ident = (envelope.get("frame_id"), envelope.get("frame_compile_id"))
        if None in ident:
            continue
        info = found.setdefault(ident, {"name": None, "cache_size": None})
        if "compilation_metrics" in envelope:
            info["cache_size"] = envelope["compilation_metrics"].get("cache_size")
            info["name"] = envelope["compilation_metrics"].get("co_name") or info["name"]
    return found


@pytest.mark.skipif(trace.find_tlparse() is None, reason="tlparse is not installed")
@pytest.mark.parametrize("run", _params(TRACED, "tlparse"))
def test_tlparse_agrees_with_the_stored_frames_and_recompiles(run, tmp_path):
    """tlparse, a tool diag did not write, reads the same compile ids from the trace as diag's frames."""
    directory = tmp_path / "trace"
    directory.mkdir()
    shutil.copy(run / "trace.log", directory / "trace.log")
    rows, (ok, _) = trace.frames(directory)
    done = subprocess.run(
        [
            trace.find_tlparse(),
            str(directory / "trace.log"),
            "-o",
            str(tmp_path / "out"),
            "--overwrite",
            "--no-browser",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ids = _tlparse_ids(tmp_path / "out")
    if ok:
        assert {row["compile_id"] for row in rows} <= ids
    stored = _stored(run)
    result = Found(stored).first(records.RESULT) or {}
    recompiled = {i for i in ids if not i.endswith("/0")}
    logged = Found(stored).all(records.RECOMPILE)
    if result.get("status") not in (statuses.FULLGRAPH_ERROR, statuses.COMPILE_ERROR) and logged:
        compiles = _trace_compiles(run / "trace.log")
        assert {f"{frame}/{count}" for frame, count in compiles if count} == recompiled
        # tlparse calls every compile id past a frame's first a recompile; dynamo (and diag) only those
        # where an entry in the frame's cache failed its guards. A frame whose earlier compile left no
        # entry (restarted after a nested graph break, or skipped) is compiled again with cache_size 0:
        # no guard failed, nothing is logged. compilation_metrics (torch >= 2.4) name the cache size.
        if all(info["cache_size"] is not None for info in compiles.values()):
            guarded = [info["name"] for (frame, count), info in compiles.items() if count and info["cache_size"]]
            assert sorted(guarded) == sorted(r["function"] for r in logged), (compiles, logged)
        else:  # torch 2.3: no cache sizes (nor the compiled function's name) in the trace
            assert len(logged) <= len(recompiled), (sorted(recompiled), [r["reason"] for r in logged])


DATACLASS_INIT = Path(__file__).parent / "fixtures" / "dataclass_init_break"


def test_a_break_in_a_generated_dataclass_init_is_placed_where_torch_2_0_says(tmp_path):
    """torch 2.0.1, tests/cases/dataclass_init_break.py without fullgraph (recorded): dynamo traces a
    ModelOutput's generated ``__init__`` as a frame of its own, and each field it assigns breaks the
    graph at STORE_ATTR. torch 2.0 logs those breaks with no graph-break record: the message is the
    exception of "STORE_ATTR triggered compile", and the place is the next graph-compile reason,
    ``store_attr`` at ``<string>``, line 3 (then 4) ``in __init__``. Read apart, the breaks took the
    site another break left unclaimed: the tuple ``+=`` in the case's loop, whose reason says only
    ``step_unsupported`` at the loop's head (as the seed's Llama had its breaks at its llama.py:525)."""
    stored, _ = records.read(DATACLASS_INIT / "diagnose.jsonl")
    assert Found(stored).first(records.BUILD)["torch_version"] == "2.0.1+cu117"
    counters = Found(stored).first(records.RESULT)["counters"]
    collector = capture.replay((DATACLASS_INIT / "torch_debug.log").read_text(encoding="utf-8"))
    breaks = findings.graph_breaks_from_counters(collector, counters)
    placed = {b["reason"]: b["location"] for b in breaks if "DataClassVariable" in b["reason"]}
    setitem = "call_method DataClassVariable() __setitem__ [ConstantVariable(str), {}()] {{}}"
    assert placed == {
        setitem.format("TensorVariable"): "<string>:3 in __init__",
        setitem.format("TupleVariable"): "<string>:4 in __init__",
    }
    # each happened in the prefill and again in the first decode step
    spans = {(b["decode_step"], b["last_decode_step"]) for b in breaks if "DataClassVariable" in b["reason"]}
    assert spans == {(0, 1)}
    added = [b["location"] for b in breaks if b["reason"].startswith("call_function BuiltinVariable(iadd)")]
    assert len(added) == 1 and added[0].endswith("/dataclass_init_break.py:17"), added
