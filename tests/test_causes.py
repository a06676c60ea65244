"""From rows to causes: a synthetic night where one torch change breaks 12 rows (3 cases, 2 configs,
2 batch sizes) of the nightly's CPU leg and a transformers release breaks 2 rows of a CUDA leg on a
pinned torch gives exactly 2 causes, each
with its owner and tracker, in check's text, --json, JUnit and alerts; the night replayed gives the
same causes (the same markers: the workflow comments on their issues instead of filing again). The
runs are stored as the probe stores them, in a real SQLite file, read by the real command line."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from conftest import cli
from factories import run_record, stored

from diag.build import identity
from diag.probe import records
from diag.verdicts import causes

OLD = identity("2.13.0.dev20260101+cpu", "a" * 40, None)
NEW = identity("2.13.0.dev20260102+cpu", "b" * 40, None)
# the CUDA leg runs a pinned torch: the night transformers moved there, it alone moved
PINNED = identity("2.13.0+cu126", "c" * 40, "12.6")
TORCH_BREAK = "Unsupported Tensor.item() call with capture_scalar_outputs=False (GB0124)"
HF_BREAK = "Data-dependent branching (GB0170)"
MODELING = "/home/u/.venv/lib/python3.11/site-packages/transformers/models/llama/modeling_llama.py:301"


def _row(case: str, fullgraph: int, batch: int, source: str = "builtin") -> dict:
    return {"case": case, "fullgraph": fullgraph, "batch_size": batch, "case_source": source, "new_tokens": 4}


def _night(db: str, nightly: int) -> None:
    """The night before and the night: the 12 torch rows break on the new nightly, their code the same;
    the 2 hf rows of the pinned CUDA build break with transformers 4.57 (4.56 the night before), in
    transformers' modeling code."""
    uid = 0
    for build, broken in ((OLD, False), (NEW, True)):
        for case in ("c1", "c2", "c3"):
            for fullgraph in (1, 0):
                for batch in (1, 2):
                    uid += 1
                    fields = _row(case, fullgraph, batch) | {"transformers_version": "4.56.0"}
                    fields |= _broken(broken, fullgraph, TORCH_BREAK, f"/home/u/proj/cases/{case}.py:19")
                    stored(db, run_record(build=build, uid=f"{nightly}-{uid}", **fields))
        for fullgraph in (1, 0):
            uid += 1
            fields = _row("hf:llama", fullgraph, 1) | {"transformers_version": "4.57.0" if broken else "4.56.0"}
            fields |= {"device": "cuda", "started_at": f"2026-01-0{nightly}T0{int(broken)}:00:00"}
            fields |= _broken(broken, fullgraph, HF_BREAK, MODELING)
            stored(db, run_record(build=PINNED, uid=f"{nightly}-{uid}", **fields))


def _broken(broken: bool, fullgraph: int, message: str, where: str) -> dict:
    """A row's columns and findings on a build where it broke: a fullgraph row fails with the break's
    error (its key the GB id), a row without fullgraph records the break."""
    if not broken:
        return {"status": "pass", "graph_break_count": 0}
    key = message[-7:-1]
    if fullgraph:
        return {
            "status": "fullgraph_error",
            "error_type": "Unsupported",
            "error_message": message,
            "error_key": key,
            "error_location": where,
        }
    gb = {"key": key, "reason": message, "count": 1, "location": where}
    return {"status": "graph_break", "graph_break_count": 1, "graph_breaks": [gb]}


def test_one_torch_change_and_one_transformers_release_are_two_causes_with_their_owners(tmp_path):
    db = str(tmp_path / "night.db")
    _night(db, 1)
    junit, alerts = tmp_path / "junit.xml", tmp_path / "alerts.json"
    done = cli("check", "--db", db, "--junit", str(junit), "--alerts", str(alerts))
    assert done.exit_code == 1, done.output
    assert done.output.count("CAUSE ") == 2, done.output
    assert (
        "CAUSE 1 of 2: GB0124 (torch; new key, status), file at pytorch/pytorch: 12 rows: 3 cases, 2 configs, 2 sizes"
        in (done.output)
    ), done.output
    assert (
        "CAUSE 2 of 2: GB0170 (transformers; new key, status), file at huggingface/transformers: 2 rows" in done.output
    )
    verdict = json.loads(cli("check", "--db", db, "--json").output)
    owned = {(c["key"], c["owner"], c["tracker"], len(c["rows"])) for c in verdict["causes"]}
    assert owned == {
        ("GB0124", "torch", "pytorch/pytorch", 12),
        ("GB0170", "transformers", "huggingface/transformers", 2),
    }
    suites = ET.parse(junit).getroot().findall("testsuite")
    causes = next(s for s in suites if s.get("name") == "diag causes")
    assert [case.get("name") for case in causes.findall("testcase")] == [
        "GB0124 (torch; new key, status)",
        "GB0170 (transformers; new key, status)",
    ]
    drafted = json.loads(alerts.read_text())
    assert [(a["owner"], a["tracker"], len(a["rows"])) for a in drafted] == [
        ("torch", "pytorch/pytorch", 12),
        ("transformers", "huggingface/transformers", 2),
    ]
    bisect = "diag bisect --case c1 --backend eager --fullgraph --batch-size 1 --new-tokens 4"  # the smallest row
    assert f"Bisect: `{bisect} --good 2.13.0.dev20260101 --bad 2.13.0.dev20260102`" in drafted[0]["body"]
    assert (
        "/home/u" not in drafted[1]["body"] and "transformers/models/llama/modeling_llama.py:301" in drafted[1]["body"]
    )
    # the report lists the night's causes above its rows, each with its owner and the rows it hit
    site = tmp_path / "site"
    assert cli("report", "--db", db, "--out", str(site)).exit_code == 0
    front = (site / "index.html").read_text()
    causes = front[front.index('<table class="causes"') : front.index("</table>", front.index('<table class="causes"'))]
    assert causes.count("<tr><td><code>") == 2 and "GB0124" in causes and "GB0170" in causes
    assert "12 rows: 3 cases, 2 configs, 2 sizes" in causes and "huggingface/transformers/issues" in causes
    assert front.index('id="causes"') < front.index('id="verdicts"')
    # the night replayed (the same rows broken again on fresh runs): the same causes, the same markers
    _night(db, 2)
    again = tmp_path / "again.json"
    cli("check", "--db", db, "--alerts", str(again))
    assert [a["marker"] for a in json.loads(again.read_text())] == [a["marker"] for a in drafted]


def test_a_break_in_the_case_s_own_code_with_nothing_moved_is_the_user_s_bug(tmp_path):
    """Two invocations on one build, nothing moved: the break's frame is the case file, so it is the
    case's own bug, said so, and addressed to no tracker."""
    db = str(tmp_path / "own.db")
    where = "/home/u/proj/mine.py:7"
    stored(db, run_record(uid="a", started_at="2026-01-01T00:00:00", **_row("mine", 0, 1, "./mine.py")))
    broken = _row("mine", 0, 1, "./mine.py") | _broken(True, 0, TORCH_BREAK, where)
    stored(db, run_record(uid="b", started_at="2026-01-02T00:00:00", **broken))
    verdict = json.loads(cli("check", "--db", db, "--json").output)
    (cause,) = verdict["causes"]
    assert (cause["owner"], cause["tracker"]) == ("the case's own code", None)
    assert "the case's own code, the user's bug" in cli("check", "--db", db).output


VERSIONS = Path(__file__).parent / "fixtures" / "versions"


def _keys(case: str) -> dict[str, set[str]]:
    """Per torch version, the cause keys of the case's recorded fixtures: its fullgraph error and its
    breaks without fullgraph, as check would key them."""
    found: dict[str, set[str]] = {}
    for path in VERSIONS.glob(f"*/{case}*/diagnose.jsonl"):
        version = path.parent.parent.name.split("+")[0]
        for record in records.read(path)[0]:
            if record["kind"] == records.RESULT and record.get("error_key"):
                key = causes.canonical(record["error_key"], record.get("error_message") or "")
            elif record["kind"] == records.GRAPH_BREAK:
                key = causes.canonical(record["key"], record.get("gb_type") or record.get("reason") or "")
            else:
                continue
            found.setdefault(version, set()).add(key)
    return found


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def test_one_problem_keeps_one_cause_across_torch_s_wordings():
    """dynamic_slice's data-dependent slice, worded three ways from 2.1 to 2.9 (a message, a graph-break
    type, a GB id; fingerprints of each differ), is one cause, GB0038, on every one of them, with
    fullgraph and without. From 2.10 torch fails it another way (a guard on a data-dependent
    expression, stated as Ne then as Eq): another cause, one across its wordings. The
    AttentionMaskInterface break of hf_static_cache, worded with and without the constant's type
    (2.2, 2.3-2.4), is one cause too."""
    sliced = _keys("dynamic_slice")
    assert {v: k for v, k in sliced.items() if (2, 1) <= _minor(v) <= (2, 9)} == {
        v: {"GB0038"} for v in sliced if (2, 1) <= _minor(v) <= (2, 9)
    }
    assert len([v for v in sliced if (2, 1) <= _minor(v) <= (2, 9)]) == 9
    assert all("GB0038" not in k for v, k in sliced.items() if _minor(v) >= (2, 10))
    # from 2.10 to 2.14, fullgraph fails on a guard torch states as Ne(u1, u3), then as Eq(u1, u3): one cause
    guarded = {v: k for v, k in _keys("dynamic_slice-fullgraph").items() if (2, 10) <= _minor(v) <= (2, 14)}
    assert len(guarded) == 5 and len(set.union(*guarded.values())) == 1, guarded
    masked = {
        v: {k for k in keys if k.startswith("Unsupported:")}
        for v, keys in _keys("hf_static_cache-fullgraph").items()
        if (2, 2) <= _minor(v) <= (2, 4)
    }
    assert len(masked) == 3 and len(set.union(*masked.values())) == 1, masked


def test_a_break_that_also_gave_up_its_frame_is_one_cause_not_two(tmp_path):
    """A break dynamo cannot resume from (in a loop: the rest of the frame runs eagerly) is stored as a
    graph break and as the hidden error of the frame given up, both keyed by its GB id. The night it
    appears, check names one cause for it, not a second one titled by the regression's kind (the
    hidden error's new key was never read as a key)."""
    db = str(tmp_path / "gave_up.db")
    where = "/home/u/proj/cases/c1.py:19"
    stored(db, run_record(build=OLD, uid="a", status="pass", graph_break_count=0, **_row("c1", 0, 1)))
    gb = {"key": "GB4636", "reason": "Call to `torch._dynamo.step_unsupported()`", "count": 1, "location": where}
    hidden = {
        "key": "GB4636",
        "source": "frame_fallback",
        "exc_type": "Unsupported",
        "message": "Call to `torch._dynamo.step_unsupported()`",
        "logger": "torch._dynamo.symbolic_convert.__graph_breaks",
        "location": where,
        "count": 1,
    }
    fields = {"status": "graph_break", "graph_break_count": 1, "hidden_error_count": 1}
    stored(db, run_record(build=NEW, uid="b", graph_breaks=[gb], hidden_errors=[hidden], **fields, **_row("c1", 0, 1)))
    verdict = json.loads(cli("check", "--db", db, "--json").output)
    kinds = sorted(r["kind"] for cause in verdict["causes"] for r in cause["regressions"])
    assert [cause["key"] for cause in verdict["causes"]] == ["GB4636"], verdict["causes"]
    assert kinds == ["new_key", "new_key"]
