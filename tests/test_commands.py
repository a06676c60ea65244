"""Every command through click's CliRunner on real SQLite files of recorded probe runs (the fast tier).

The DB (conftest.recorded_db) holds the recorded runs on torch 2.13.0 and again on a nightly on
which append_last with fullgraph fails: a regression for check, compare, bisect and the report.
"""

from __future__ import annotations

import json
import platform
import re
import sqlite3
import xml.etree.ElementTree as ET
from importlib import metadata

import pytest
from conftest import NIGHTLY, REPO, cli, run_section

from diag import pages, store
from diag.probe.statuses import STATUSES

BASE = "2.13.0+cpu"
NEW = NIGHTLY["torch_version"]
RECORDED_CONFIG = [
    "--backend",
    "aot_eager",
    "--fullgraph",
    "--batch-size",
    "2",
    "--prompt-length",
    "8",
    "--new-tokens",
    "4",
]


def _run_id(db, case: str, fullgraph: int, version: str) -> int:
    return next(
        store.open_db(db).query(
            "SELECT runs.id FROM runs JOIN torch_builds b ON b.id = runs.torch_build_id "
            'WHERE "case" = ? AND fullgraph = ? AND b.version = ?',
            [case, fullgraph, version],
        )
    )["id"]


def test_cases_and_statuses_list_the_vocabulary():
    cases = json.loads(cli("cases", "--json").stdout)
    assert {c["name"] for c in cases} == {"append_last", "dynamic_slice", "hf_static_cache", "hf_dynamic_cache"}
    listed = json.loads(cli("statuses", "--json").stdout)
    assert [s["name"] for s in listed] == [s.name for s in STATUSES]
    text = cli("statuses").output
    assert all(s.meaning in text for s in STATUSES)


def test_runs_lists_newest_first_and_filters_by_case(recorded_db):
    listed = json.loads(cli("runs", "--db", str(recorded_db), "--json", "--limit", "100").stdout)
    assert len(listed) == 30 and listed[0]["id"] > listed[-1]["id"]
    only = json.loads(cli("runs", "--db", str(recorded_db), "--json", "--case", "hang").stdout)
    assert [r["status"] for r in only] == ["timeout", "timeout"]
    assert "torch 2.13.0+cpu" in cli("runs", "--db", str(recorded_db), "--limit", "30").output


def test_show_names_the_status_meaning_locations_and_counts(recorded_db):
    run_id = _run_id(recorded_db, "dynamic_slice", 0, BASE)
    shown = cli("show", str(run_id), "--db", str(recorded_db)).output
    assert "status: graph_break (compiled with at least one graph break" in shown
    assert "graph breaks (2)" in shown and "dynamic_slice.py:" in shown
    full = json.loads(cli("show", str(run_id), "--db", str(recorded_db), "--json").stdout)
    assert f"config: seed {full['config']['seed']}, threads " in shown  # what the run was built with
    assert full["graph_break_count"] == sum(gb["count"] for gb in full["graph_breaks"])
    assert all(t["mode"] in ("eager", "compiled") for t in full["timings"])
    crash = cli("show", str(_run_id(recorded_db, "segfault", 1, BASE)), "--db", str(recorded_db)).output
    assert "graph breaks (-)" in crash and "signal" in crash


def test_compare_two_builds_names_the_status_change(recorded_db):
    out = json.loads(cli("compare", BASE, NEW, "--db", str(recorded_db), "--json").stdout)
    assert out["compared"] == f"{BASE} -> {NEW}"
    changed = [r for r in out["rows"] if r["status_before"] != r["status_after"]]
    assert [(r["row"].split()[0], r["status_before"], r["status_after"]) for r in changed] == [
        ("append_last", "pass", "fullgraph_error")
    ]
    text = cli("compare", BASE, NEW, "--db", str(recorded_db)).output
    assert "append_last aot_eager fullgraph cpu float32 b2 p8 n4: pass -> fullgraph_error" in text


def test_check_fails_on_the_regression_and_writes_junit(recorded_db, tmp_path):
    junit = tmp_path / "junit.xml"
    done = cli("check", "--db", str(recorded_db), "--junit", str(junit))
    assert done.exit_code == 1
    assert f"checked: {NEW} against baseline {BASE}; 15 rows" in done.output
    assert (
        "REGRESSION append_last aot_eager fullgraph cpu float32 b2 p8 n4: status pass -> fullgraph_error" in done.output
    )
    suites = ET.parse(junit).getroot()
    rows_suite, causes_suite = suites.findall("testsuite")
    assert (rows_suite.get("tests"), rows_suite.get("failures")) == ("15", "1")
    # and the cause behind it, a test case of its own, with its owner: torch moved, nothing else did
    assert (causes_suite.get("name"), causes_suite.get("tests")) == ("diag causes", "1")
    assert "owner torch (pytorch/pytorch)" in causes_suite.find("testcase/failure").get("message")
    same = cli("check", "--db", str(recorded_db), "--baseline", NEW, "--json")
    assert same.exit_code == 0 and json.loads(same.stdout)["regressions"] == []


def test_merge_keeps_each_run_once(recorded_db, copied_db, tmp_path):
    out = tmp_path / "history.db"
    first = json.loads(cli("merge", str(out), str(copied_db), "--json").stdout)
    again = json.loads(cli("merge", str(out), str(copied_db), "--json").stdout)
    assert first[0]["added"] == 30 and again[0] == {"shard": str(copied_db), "added": 0, "already_present": 30}
    merged, original = store.open_db(out), store.open_db(copied_db)
    assert store.table_counts(merged) == store.table_counts(original)
    assert store.integrity(merged) == "ok"


def test_report_shows_the_regression_and_generates_its_legend_from_the_status_table(recorded_db, tmp_path):
    out = tmp_path / "site"
    done = cli("report", "--db", str(recorded_db), "--out", str(out), "--json")
    assert json.loads(done.stdout)["files"] >= 30
    index = (out / "index.html").read_text()
    for status in STATUSES:
        assert f".s-{status.name} {{ background: {status.colour}; }}" in index
        assert f'title="{status.meaning}"' in index
    assert "started failing" in index and NEW in index
    # the front page names the first bad build's error and links the commit range
    transitions = index[index.index("<h2>Newest transitions</h2>") :]
    assert "UserError: " in transitions and "..." + "b" * 40 + '"' in transitions
    assert "https://github.com/pytorch/pytorch/compare/" in transitions

    machine = json.loads((out / "report.json").read_text())
    rows = {(r["row"]["case"], r["row"]["fullgraph"], r["row"]["case_source"] == "builtin") for r in machine["rows"]}
    assert len(rows) == 15 and ("swallowed_error", 1, False) in rows
    page = run_section(out, _run_id(recorded_db, "dynamic_slice", 0, BASE))
    assert "Graph breaks (2)" in page and "dynamic_slice.py:" in page


def test_repro_carries_the_case_source(recorded_db, tmp_path):
    script = tmp_path / "repro.py"
    cli("repro", str(_run_id(recorded_db, "dynamic_slice", 1, BASE)), "--db", str(recorded_db), "-o", str(script))
    source = script.read_text()
    assert "valid_past_index" in source and "import diag" not in source and "'fullgraph': True" in source


def test_bisect_over_stored_builds_needs_no_install(recorded_db, copied_db, tmp_path):
    candidates = tmp_path / "candidates.txt"
    candidates.write_text("2.13.0\n2.14.0.dev20260101\n")
    done = cli(
        "bisect",
        "--case",
        "append_last",
        *RECORDED_CONFIG,
        "--good",
        "2.13.0",
        "--bad",
        "2.14.0.dev20260101",
        "--candidates",
        str(candidates),
        "--confirm",
        "0",  # one run of each build decides: the one stored
        "--db",
        str(copied_db),
        "--json",
    )
    summary = json.loads(done.stdout)
    assert (summary["good_status"], summary["bad_status"]) == ("pass", "fullgraph_error")
    assert summary["runs"] == {"2.13.0": 1, "2.14.0.dev20260101": 1} and summary["runs_to_judge"] == 1
    assert summary["first_bad"]["git_version"] == NIGHTLY["git_version"]
    assert summary["commit_range"].endswith(".." + NIGHTLY["git_version"])
    assert store.open_db(copied_db)["runs"].count == 30  # every verdict came from stored runs


def test_env_list_is_empty_in_a_fresh_home():
    assert json.loads(cli("env", "list", "--json").stdout) == []


def test_run_rejects_an_unknown_case_before_writing(tmp_path):
    done = cli("run", "--case", "nope", "--db", str(tmp_path / "x.db"))
    assert done.exit_code == 1 and "unknown case 'nope'" in done.output
    assert not (tmp_path / "x.db").exists()


@pytest.mark.slow
def test_run_records_one_real_eager_run(tmp_path):
    """The one real probe in the fast tier: eager backend, no timing pass, two tokens."""
    db = tmp_path / "one.db"
    done = cli(
        "run",
        "--case",
        "append_last",
        "--backend",
        "eager",
        "--fullgraph",
        "--no-timing",
        "--new-tokens",
        "2",
        "--prompt-length",
        "4",
        "--db",
        str(db),
        "--json",
    )
    (run,) = json.loads(done.stdout)
    assert (run["status"], run["case_source"], run["graph_break_count"]) == ("pass", "builtin", 0)
    assert f"recorded 1 run in {db}" in done.stderr and f"next: diag show {run['id']} --db {db}" in done.stderr
    assert run["artifacts_dir"].startswith(str(tmp_path / "one.runs"))
    assert run["case_path"] == str(REPO / "diag" / "cases" / "append_last.py")
    # the environment it ran in, every installed distribution with its version, stored once
    [held] = store.environments(store.open_db(db), [run["environment"]]).values()
    assert held["packages"]["torch"] == metadata.version("torch")
    assert held["packages"]["click"] == metadata.version("click")
    assert held["python"] == platform.python_version()


def test_env_add_and_rm_refuse_what_they_cannot_do():
    done = cli("env", "add", "current")
    assert done.exit_code == 1 and "names an existing interpreter; nothing to provision" in done.output
    done = cli("env", "add", "2.x")  # refused where it enters, as a usage error
    assert done.exit_code == 2 and "malformed torch spec" in done.output
    done = cli("env", "rm", "nope")
    assert done.exit_code == 1 and "no provisioned environment named 'nope'" in done.output


def test_heartbeat_names_each_running_job_until_it_ends():
    import time

    from diag.run.runner import Heartbeat

    said: list[str] = []
    with Heartbeat(said.append, interval_s=0.05) as heartbeat:
        heartbeat.started(1, "[1/2] append_last")
        heartbeat.started(2, "[2/2] dynamic_slice")
        time.sleep(0.3)
        heartbeat.finished(1)
        count = len(said)
        time.sleep(0.3)
    assert any(line.startswith("[1/2] append_last: still running, ") for line in said[:count])
    assert not any("append_last" in line for line in said[count + 1 :])
    assert any(line.startswith("[2/2] dynamic_slice: still running") for line in said[count:])


def _names(row):
    return ", ".join(f'"{name}"' for name in row)


def _copy_build(db_path, version, variant, **changes):
    """The runs of build NEW again, on another build (a CUDA leg's nightly) or with changed columns."""
    conn = sqlite3.connect(db_path)
    conn.row_factory = sqlite3.Row
    source = conn.execute("SELECT * FROM torch_builds WHERE version = ?", [NEW]).fetchone()
    build = dict(source)
    build.pop("id")
    build.update(
        build_key=f"{version}|{variant}",
        version=version,
        variant=variant,
        cuda_version=None if variant == "cpu" else "12.6",
    )
    cursor = conn.execute(
        f"INSERT INTO torch_builds ({_names(build)}) VALUES ({', '.join('?' * len(build))})", list(build.values())
    )
    for run in conn.execute("SELECT * FROM runs WHERE torch_build_id = ?", [source["id"]]).fetchall():
        row = dict(run)
        row.pop("id")
        row.update(torch_build_id=cursor.lastrowid, uid=row["uid"] + variant, **changes)
        conn.execute(f"INSERT INTO runs ({_names(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
    conn.commit()
    conn.close()


def test_check_compares_each_variant_with_its_own_previous_build(copied_db):
    """A CUDA leg's nightly sorts after the CPU one; it must not become the CPU regression's 'newest'."""
    _copy_build(copied_db, NEW.replace("+cpu", "+cu126"), "cu126", device="cuda")
    done = cli("check", "--db", str(copied_db))
    assert done.exit_code == 1, done.output
    assert f"{NEW} against baseline {BASE}" in done.output
    assert (
        "REGRESSION append_last aot_eager fullgraph cpu float32 b2 p8 n4: status pass -> fullgraph_error" in done.output
    )


def test_check_does_not_compare_across_a_transformers_change(copied_db):
    conn = sqlite3.connect(copied_db)
    build = conn.execute("SELECT id FROM torch_builds WHERE version = ?", [NEW]).fetchone()[0]
    conn.execute("UPDATE runs SET transformers_version = '9.9.9' WHERE torch_build_id = ?", [build])
    conn.commit()
    conn.close()
    done = cli("check", "--db", str(copied_db), "--json")
    verdict = json.loads(done.stdout)
    assert done.exit_code == 0 and verdict["regressions"] == []
    assert len(verdict["not_compared"]) == 15
    assert "transformers 9.9.9" in verdict["not_compared"][0]["note"]


def test_prune_keeps_verdicts_and_summaries_and_drops_old_samples(copied_db, tmp_path):
    before = store.table_counts(store.open_db(copied_db))
    done = cli("prune", "--db", str(copied_db), "--keep-builds", "1", "--json")
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)
    assert result["builds"] == 1 and result["runs"] == 15 and result["series"] > 0
    db = store.open_db(copied_db)
    after = store.table_counts(db)
    detail = ("timings", "frames")  # a compacted run keeps a summary of its timings and loses its compiled frames
    assert {t: n for t, n in after.items() if t not in detail} == {t: n for t, n in before.items() if t not in detail}
    assert 0 < after["frames"] < before["frames"]
    old = db.execute(
        "SELECT t.metric, t.samples, t.summary FROM timings t JOIN runs r ON r.id = t.run_id "
        "JOIN torch_builds b ON b.id = r.torch_build_id WHERE b.version = ?",
        [BASE],
    ).fetchall()
    assert old and all(
        metric == "decode_step" and samples is None and json.loads(summary)["n"] > 0 for metric, samples, summary in old
    )
    new = db.execute(
        "SELECT t.samples FROM timings t JOIN runs r ON r.id = t.run_id "
        "JOIN torch_builds b ON b.id = r.torch_build_id WHERE b.version = ?",
        [NEW],
    ).fetchall()
    assert new and all(samples is not None for (samples,) in new)
    # the gate and the report still read the pruned history
    check = cli("check", "--db", str(copied_db))
    assert check.exit_code == 1 and "status pass -> fullgraph_error" in check.output
    assert cli("report", "--db", str(copied_db), "--out", str(tmp_path / "site")).exit_code == 0
    again = json.loads(cli("prune", "--db", str(copied_db), "--keep-builds", "1", "--json").stdout)
    assert again["series"] == 0


def test_bytes_that_are_not_utf8_and_mathtext_in_stored_values_break_no_command(copied_db, tmp_path):
    conn = sqlite3.connect(copied_db)
    first = conn.execute("SELECT min(id) FROM runs").fetchone()[0]
    conn.execute(
        "UPDATE runs SET error_message = CAST(X'fffe411b5b33316d42' AS TEXT), "
        "error_type = CAST(X'c328' AS TEXT) WHERE id = ?",
        [first],
    )
    conn.execute("UPDATE runs SET model = '$\\alpha_{x$ model'")  # mathtext, unbalanced, in every chart label
    conn.commit()
    conn.close()
    for args in (
        ["runs"],
        ["show", str(first)],
        ["check"],
        ["compare", BASE, NEW],
        ["report", "--out", str(tmp_path / "site")],
    ):
        done = cli(*args, "--db", str(copied_db))
        assert done.exit_code in (0, 1), (args, done.output)
        assert done.exception is None or isinstance(done.exception, SystemExit), (args, done.exception)
        assert "\x1b" not in done.output and "Traceback" not in done.output, args
    shown = cli("show", str(first), "--db", str(copied_db)).output
    assert "\\xff\\xfeA" in shown


def test_check_writes_one_alert_per_cause(recorded_db, tmp_path):
    alerts_file = tmp_path / "alerts.json"
    done = cli("check", "--db", str(recorded_db), "--alerts", str(alerts_file), "--site-url", "https://x.github.io/d")
    assert done.exit_code == 1
    (alert,) = json.loads(alerts_file.read_text())
    assert alert["title"].startswith("diag: UserError:") and "(torch; status): UserError: " in alert["title"]
    assert alert["title"].endswith(f"on {NEW}, 1 row: 1 case, 1 config")
    assert (alert["owner"], alert["tracker"]) == ("torch", "pytorch/pytorch")
    assert alert["rows"] == ["append_last aot_eager fullgraph cpu float32 b2 p8 n4"]
    body = alert["body"]
    # the bisect that searches the row's own config between the two builds, as bisect takes them
    bisect = "diag bisect --case append_last --backend aot_eager --fullgraph --batch-size 2 --prompt-length 8"
    assert f"{bisect} --new-tokens 4 --good {BASE.split('+')[0]} --bad {NEW.split('+')[0]}`" in body
    assert f"first bad build: {NEW}" in body and f"last good build: {BASE}" in body
    assert "pytorch/pytorch/compare/" in body and "Error: `UserError`" in body and "diag repro " in body
    assert f"<!-- {alert['marker']} -->" in body
    # the run page named is where the report puts that run's details
    (link,) = re.findall(r"Run page: https://x\.github\.io/d/(\S+)", body)
    page, _, section = link.partition("#")
    site = tmp_path / "site"
    assert cli("report", "--db", str(recorded_db), "--out", str(site)).exit_code == 0
    assert f'<section id="{section}">' in (site / page).read_text() and section.startswith("run-")
    again = tmp_path / "again.json"
    cli("check", "--db", str(recorded_db), "--alerts", str(again))
    assert json.loads(again.read_text())[0]["marker"] == alert["marker"]  # the same cause, the same issue


def test_a_key_that_appeared_says_what_it_stands_for(copied_db, tmp_path):
    conn = sqlite3.connect(copied_db)
    run_id = conn.execute(
        "SELECT r.id FROM runs r JOIN torch_builds b ON b.id = r.torch_build_id "
        "WHERE b.version = ? AND r.\"case\" = 'append_last' AND r.fullgraph = 0",
        [NEW],
    ).fetchone()[0]
    conn.execute(
        "INSERT INTO recompiles (run_id, key, reason, function, location, decode_step, guard_failures) "
        "VALUES (?, 'Recompile:ef68e918e5dc', ?, 'forward', '/w/m.py:3', 2, 1)",
        [run_id, "tensor 'x' size mismatch at index 1. expected 9, actual 10\nmore"],
    )
    conn.commit()
    conn.close()
    cli("report", "--db", str(copied_db), "--out", str(tmp_path / "site"))
    index = (tmp_path / "site" / "index.html").read_text()
    changes = index[index.index("<h2>Newest key changes</h2>") :]
    assert re.search(
        r"<code>Recompile:ef68e918e5dc</code> <span class=\"muted\">tensor &#39;x&#39; size mismatch at "
        r"index 1. expected 9, actual 10</span>",
        changes,
    ), changes[:600]


def test_compare_relates_builds_of_another_python_variant_and_transformers_and_names_each_difference(tmp_path):
    """torch 2.0.1 runs on Python 3.10 only (no torch.compile on 3.11), with an older transformers and a
    CUDA variant: compare still relates every row, and says what besides torch differs."""
    from conftest import recorded, replay

    old = {
        "torch_version": "2.0.1+cu117",
        "git_version": "e" * 40,
        "cuda_version": "11.7",
        "python": "3.10.13",
        "transformers_version": "4.49.0",
    }
    runs = tmp_path / "x.runs"
    names = ["append_last-fullgraph", "dynamic_slice-fullgraph"]
    db = tmp_path / "x.db"
    replay([recorded(n, runs, "old", old) for n in names] + [recorded(n, runs, "new") for n in names], db)
    out = json.loads(cli("compare", "2.0.1+cu117", "2.13.0+cpu", "--db", str(db), "--json").stdout)
    recorded_with = store.open_db(db).execute("SELECT max(transformers_version) FROM runs").fetchone()[0]
    assert out["compared"] == (
        "2.0.1+cu117 -> 2.13.0+cpu (also different: variant cu117 -> cpu; CUDA 11.7 -> none; "
        f"Python 3.10 -> 3.11; transformers 4.49.0 -> {recorded_with})"
    )
    assert [(r["status_before"], r["status_after"]) for r in out["rows"]] == [
        ("pass", "pass"),
        ("fullgraph_error", "fullgraph_error"),
    ]
    said = f"also different: Python 3.10 -> 3.11, transformers 4.49.0 -> {recorded_with}"
    assert all(r["note"] == said for r in out["rows"])
    text = cli("compare", "2.0.1+cu117", "2.13.0+cpu", "--db", str(db)).output
    assert "absent" not in text and "    also different: Python 3.10 -> 3.11" in text


def test_run_pages_show_what_was_recorded_and_nothing_for_what_was_not(copied_db, tmp_path):
    """A crash records no memory kind and no captured calls, and a pruned run no capabilities: the
    page leaves them out instead of "peak memory (-)", "holding - captured torch calls" or an empty
    heading; a recompile's function is never "None"; timing quantiles are in ms beside the ms medians;
    a transition links the run before the change as well as the one after it."""
    recorded_db = copied_db
    out = tmp_path / "site"
    assert cli("report", "--db", str(recorded_db), "--out", str(out)).exit_code == 0
    crash = run_section(out, _run_id(recorded_db, "segfault", 1, BASE))
    assert "peak memory (-)" not in crash
    assert "holding - captured" not in crash and "holding None" not in crash
    broken = run_section(out, _run_id(recorded_db, "dynamic_slice", 0, BASE))
    assert "<code>None</code>" not in broken and '<div class="scroll"><table><thead><tr><th>key</th>' in broken
    assert "decode_step samples</th><td>n=" in broken and "(ms)</td>" in broken and "(s)</td>" not in broken
    before, after = _run_id(recorded_db, "append_last", 1, BASE), _run_id(recorded_db, "append_last", 1, NEW)
    transitions = (out / "transitions.html").read_text()
    hrefs = [pages.run_href(store.get_run(store.open_db(recorded_db), run_id)) for run_id in (before, after)]
    assert f'<a href="{hrefs[0]}">#{before}</a> → <a href="{hrefs[1]}">#{after}</a>' in transitions
    assert cli("prune", "--db", str(recorded_db), "--keep-builds", "1").exit_code == 0  # BASE's runs compacted
    assert cli("report", "--db", str(recorded_db), "--out", str(out)).exit_code == 0
    pruned = run_section(out, _run_id(recorded_db, "segfault", 1, BASE))
    assert "Capabilities of this torch" not in pruned
