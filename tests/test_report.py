"""The static report: rendered from real runs, escaped, updated in place, loaded in a real browser."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from pathlib import Path

import browser
import pytest
from conftest import cli, diag, recorded, replay, run_section
from factories import run_record, stored

from diag import pages, report, store
from diag.build import identity
from diag.build import order as build_order
from diag.report import templating
from diag.report.history import build_matrix

CHROMIUM = browser.CHROMIUM


def test_matrix_of_real_runs(findings_db, findings, tmp_path):
    out = tmp_path / "site"
    done = diag("report", "--db", str(findings_db), "--out", str(out), "--json", cwd=tmp_path)
    assert json.loads(done.stdout)["files"] >= len(findings) + 2
    index = (out / "index.html").read_text()
    machine = json.loads((out / "report.json").read_text())
    assert [b["version"] for b in machine["builds"]] == [findings[("append_last", True)]["build_version"]]
    by_label = {(row["row"]["case"], row["row"]["fullgraph"]): row for row in machine["rows"]}
    for (case, fullgraph), run in findings.items():
        cell = next(iter(by_label[(case, int(fullgraph))]["cells"].values()))
        assert cell == {"run": run["id"], "status": run["status"], "runs": [[run["id"], run["status"]]]}
        assert f'href="{pages.run_href(run)}"' in index
        assert run_section(out, run["id"])
    assert "fullgraph_error" in index and "append_last" in index
    assert 'title="git ' + findings[("append_last", True)]["build_git_version"] in index


def test_run_page_shows_the_exception_location_and_artifacts(findings_db, findings, tmp_path):
    out = tmp_path / "site"
    diag("report", "--db", str(findings_db), "--out", str(out), cwd=tmp_path)
    failing = findings[("dynamic_slice", True)]
    page = run_section(out, failing["id"])
    assert "torch_debug.log" in page and "diag report --carry-artifacts" in page  # named, stayed with the run
    diag("report", "--db", str(findings_db), "--out", str(out), "--carry-artifacts", cwd=tmp_path)
    page = run_section(out, failing["id"])
    assert failing["error_type"] in page
    assert "dynamic_slice.py:" in page
    links = re.findall(r'<a href="(\.\./artifacts/[^"]+)">', page)
    assert any(link.endswith("torch_debug.log") for link in links)
    for link in links:
        assert (out / "runs" / link).resolve().exists(), link
    breaking = findings[("dynamic_slice", False)]
    page = run_section(out, breaking["id"])
    assert "GB0124" in page and "compile-graph-break-site" in page
    assert "Recompiles (" in page and "valid_past_index" in page


def _hostile_db(path: Path) -> int:
    record = run_record(
        build=identity("2.13.0", "deadbeef", None),
        graph_breaks=[{"key": "<img src=x onerror=alert(1)>", "reason": "<script>1</script>", "count": 1}],
        hidden_errors=[{"key": "k", "exc_type": "E", "message": "</pre><script>2</script>", "count": 1}],
        uid="hostile",
        case="<b>case</b>",
        status="compile_error",
        error_type="RuntimeError",
        error_message="<script>alert('x')</script> \x1b[31mred\x1b[0m",
    )
    return stored(path, record)


def test_strings_from_logs_and_case_names_are_escaped(tmp_path):
    db_path = tmp_path / "hostile.db"
    run_id = _hostile_db(db_path)
    db = store.open_db(db_path)
    files = report.render(db, tmp_path / "site")
    page = files[pages.run_page(store.get_run(db, run_id))]
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page
    assert "<script>alert" not in page and "<script>1" not in page and "<script>2" not in page
    assert "<img src=x" not in page
    assert "&lt;b&gt;case&lt;/b&gt;" in files["index.html"]


def test_rerun_updates_in_place_and_keeps_foreign_files(findings_db, tmp_path):
    out = tmp_path / "site"
    diag("report", "--db", str(findings_db), "--out", str(out), cwd=tmp_path)
    (out / "notes.txt").write_text("mine")
    stale = next((out / "runs").glob("*.html"))
    (out / "runs" / "999999.html").write_text("not written by diag")
    manifest = json.loads((out / report.MANIFEST).read_text())
    manifest.append("runs/old-page.html")
    (out / "runs" / "old-page.html").write_text("written by an earlier report")
    (out / report.MANIFEST).write_text(json.dumps(manifest))
    done = diag("report", "--db", str(findings_db), "--out", str(out), "--json", cwd=tmp_path)
    assert json.loads(done.stdout)["removed"] == 1
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "runs" / "999999.html").exists()
    assert not (out / "runs" / "old-page.html").exists()
    assert stale.exists()


class _InterruptedAfter(dict):
    """The pages of a render, whose walk is stopped by a real SIGINT (Ctrl-C) after ``count`` pages."""

    count = 3

    def items(self):
        for index, item in enumerate(super().items()):
            if index == self.count:
                os.kill(os.getpid(), signal.SIGINT)
            yield item


def test_a_report_interrupted_partway_is_taken_up_by_the_next(findings_db, tmp_path):
    out = tmp_path / "site"
    db = store.open_db(findings_db, readonly=True)
    files = report.render(db, out)
    # Python's own Ctrl-C handler, whatever this process inherited (a background job ignores SIGINT)
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            report.publish(_InterruptedAfter(files), out)
    finally:
        signal.signal(signal.SIGINT, saved)
    left = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and not p.name.startswith(".")}
    assert 0 < len(left) < len(files)
    done = diag("report", "--db", str(findings_db), "--out", str(out), "--json", cwd=tmp_path)
    assert json.loads(done.stdout)["files"] == len(files)
    assert sorted(json.loads((out / report.MANIFEST).read_text())) == sorted(files)
    assert all((out / name).is_file() for name in files)


def _build(id_, version, date=None):
    return {"id": id_, "version": version, "nightly_date": date, "git_version": f"g{id_}", "variant": "cpu"}


def _run(id_, build_id, status):
    return {
        "id": id_,
        "torch_build_id": build_id,
        "case": "append_last",
        "backend": "inductor",
        "fullgraph": 1,
        "dynamic": "auto",
        "mode": "default",
        "device": "cpu",
        "dtype": "float32",
        "status": status,
    }


def test_builds_order_by_version_then_nightly_date():
    builds = [
        _build(1, "2.2.0"),
        _build(2, "2.1.0.dev20230621", "2023-06-21"),
        _build(3, "2.10.0"),
        _build(4, "2.1.0"),
        _build(5, "2.1.0.dev20230601", "2023-06-01"),
    ]
    assert [b["id"] for b in sorted(builds, key=build_order)] == [5, 2, 4, 1, 3]


def test_transitions_and_key_changes_between_consecutive_builds():
    builds = [
        _build(1, "2.1.0.dev20230601", "2023-06-01"),
        _build(2, "2.1.0.dev20230602", "2023-06-02"),
        _build(3, "2.1.0.dev20230603", "2023-06-03"),
    ]
    runs = [_run(10, 1, "pass"), _run(11, 2, "fullgraph_error"), _run(12, 3, "pass")]
    keys = {11: {("graph_breaks", "GB0124")}}
    matrix = build_matrix(builds, runs, keys)
    assert [(t.kind, t.last_before["id"], t.first_after["id"]) for t in matrix.transitions] == [
        ("fix", 2, 3),
        ("regression", 1, 2),
    ]  # newest first
    row = matrix.rows[0]
    assert [matrix.cell(row, b).changed for b in (1, 2, 3)] == [False, True, True]
    assert [(c.build["id"], c.appeared, c.disappeared) for c in matrix.key_changes] == [
        (3, [], [("graph_breaks", "GB0124")]),
        (2, [("graph_breaks", "GB0124")], []),
    ]


def test_datasette_views(findings_db):
    db = store.open_db(findings_db)
    assert {"run_summary", "latest_status"} <= set(db.view_names())
    latest = list(db.query('SELECT "case", status FROM latest_status'))
    assert len(latest) == db["runs"].count


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium package is not installed")
def test_index_loads_in_headless_chromium_without_console_errors(findings_db, findings, tmp_path):
    out = tmp_path / "site"
    diag("report", "--db", str(findings_db), "--out", str(out), cwd=tmp_path)
    checked = [
        out / "index.html",
        out / pages.run_page(findings[("dynamic_slice", False)]),
        out / "cases" / "append_last.html",
        out / "breaks" / "GB0124.html",  # dynamic_slice's .item() break, torch's GB id
    ]
    for number, page in enumerate(checked):
        shot = tmp_path / f"page{number}.png"
        assert browser.console_errors(page, shot, tmp_path / f"profile{number}") == []
        assert shot.stat().st_size > 5000
    # The check itself can fail: a page with a script error is caught.
    broken = out / "broken.html"
    broken.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    assert browser.console_errors(broken, tmp_path / "broken.png", tmp_path / "profile-broken")


@pytest.mark.slow
def test_sweep_runs_are_plotted_against_batch_size(tmp_path):
    db = tmp_path / "sweep.db"
    done = diag(
        "run",
        "--case",
        "append_last",
        "--backend",
        "eager",
        "--fullgraph",
        "--new-tokens",
        "4",
        "--repeats",
        "2",
        "--threads",
        "1",
        "--sweep",
        "batch",
        "--sweep-values",
        "1,2",
        "--db",
        str(db),
        "--json",
        cwd=tmp_path,
    )
    assert [r["batch_size"] for r in json.loads(done.stdout)] == [1, 2]
    out = tmp_path / "site"
    diag("report", "--db", str(db), "--out", str(out), cwd=tmp_path)
    page = (out / "cases" / "append_last.html").read_text()
    assert "Throughput against batch size" in page and "Peak memory against batch size" in page
    assert page.count("<svg") >= 6
    assert "tokens / s" in page and "batch size" in page


def test_bad_sweep_values(tmp_path):
    done = diag(
        "run",
        "--case",
        "append_last",
        "--sweep",
        "batch",
        "--sweep-values",
        "1,x",
        "--db",
        str(tmp_path / "x.db"),
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 2 and "--sweep-values" in done.stderr


def test_a_run_made_in_ci_links_its_uploaded_run_directory(tmp_path):
    """A leg's machine is gone by the time the site is published: the run page links the workflow
    run and names the artifact and the directory in it. What a run recorded that is not a plain https
    link to a repository's run is not linked."""
    from diag.run import runner

    runs = tmp_path / "shard.runs"
    made = recorded("append_last-fullgraph", runs, "ci")
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "org/diag",
        "GITHUB_RUN_ID": "123456",
        "GITHUB_RUN_ATTEMPT": "2",
        "DIAG_ARTIFACT": "shard-cpu-0-123456-2",
    }
    assert runner.ci_provenance({"GITHUB_RUN_ID": "1"}, made) is None  # not in GitHub Actions
    hostile = recorded("append_last-no-fullgraph", runs, "ci")
    for run_dir, values in ((made, env), (hostile, {**env, "GITHUB_SERVER_URL": "javascript:alert(1)//"})):
        spec = json.loads((run_dir / "spec.json").read_text())
        spec["ci"] = runner.ci_provenance(values, run_dir)
        (run_dir / "spec.json").write_text(json.dumps(spec))
    db = tmp_path / "ci.db"
    good, bad = replay([made, hostile], db)
    shutil.rmtree(runs)  # as on the publishing machine: the run directories are not there
    site = tmp_path / "site"
    cli("report", "--db", str(db), "--out", str(site))
    page = run_section(site, good)
    assert '<a href="https://github.com/org/diag/actions/runs/123456/attempts/2">workflow run 123456</a>' in page
    assert "<code>shard-cpu-0-123456-2</code>" in page and f"<code>shard.runs/{made.name}/</code>" in page
    assert "No artifacts found" not in page
    other = run_section(site, bad)
    assert "javascript:" not in other and "No artifacts found next to the database." in other


def test_the_front_page_names_an_error_torch_swallowed(recorded_db, tmp_path):
    """The 2023 nightlies' ``guards`` TypeError, caught by dynamo and logged at DEBUG only: its verdict
    line names it, whatever the row's status, beside the errors the runs raised."""
    site = tmp_path / "site"
    files = report.render(store.open_db(recorded_db), site)
    front = files["index.html"]
    start = front.index('<tr data-case="swallowed_error"')
    line = front[start : front.index("</tr>", start)]
    assert "hidden (torch swallowed it):" in line
    assert "TypeError: VariableBuilder.__init__() got an unexpected keyword argument &#39;guards&#39;" in line
    quiet = front.index('<tr data-case="append_last"')
    assert "hidden (torch swallowed it)" not in front[quiet : front.index("</tr>", quiet)]


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium package is not installed")
def test_the_matrix_filter_matches_words_errors_and_repeats_and_lives_in_the_url(recorded_db, tmp_path):
    site = tmp_path / "site"
    cli("report", "--db", str(recorded_db), "--out", str(site))
    script = """
      var box = d.getElementById("filter");
      function shown() {
        return Array.from(d.querySelectorAll("#matrix tbody tr"))
          .filter(function (tr) { return tr.style.display !== "none"; })
          .map(function (tr) { return tr.querySelector(".rowhead a").textContent + " " +
                                      tr.querySelector(".rowhead .counts").textContent; });
      }
      function typed(text) { box.value = text; box.dispatchEvent(new Event("input")); return shown(); }
      var fromUrl = {box: box.value, rows: shown()};
      var out = {fromUrl: fromUrl, guards: typed("guards"), hash: w.location.hash,
                 fullgraph: typed("fullgraph"), both: typed("append_last no-fullgraph"), all: typed("").length};
      typed("guards");
      box.value = "something the browser restored";  // Back: the box as the browser kept it, the URL as it was
      w.dispatchEvent(new Event("pageshow"));
      out.back = {box: box.value, rows: shown().length};
      return out;
    """
    page = site / "index.html"
    got = browser.measure(page, 1400, 900, script, tmp_path, fragment="#filter=crash")
    assert got["fromUrl"]["box"] == "crash" and got["fromUrl"]["rows"]
    crashed = {row.split()[0] for row in got["fromUrl"]["rows"]}
    assert crashed == {"segfault", "garbage_exit"}, got["fromUrl"]  # the two recorded crashes
    assert got["guards"] and all(row.startswith("swallowed_error") for row in got["guards"]), got["guards"]
    assert got["hash"] == "#filter=guards"
    assert got["fullgraph"] and not any("no-fullgraph" in row for row in got["fullgraph"]), got["fullgraph"]
    assert got["both"] and all(r.startswith("append_last") and "no-fullgraph" in r for r in got["both"])
    assert got["back"] == {"box": "guards", "rows": len(got["guards"])}
    assert got["all"] > len(got["guards"])


def test_the_report_templates_look_up_a_dicts_keys_and_methods_as_jinja_does():
    """The report's environment reads ``run.status`` of a dict as the item at once; a dict's own
    methods (``items``, ``get``) are still the methods, even where a key has their name, and a
    missing key is still an error."""
    import jinja2

    env = templating.environment()
    page = env.from_string(
        "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d.get('status') }} {{ d.status }} {{ d.nested.x }}"
    )
    data = {"items": 1, "get": 2, "status": "pass", "nested": {"x": "y"}}
    assert page.render(d=data) == "items=1;get=2;status=pass;nested={&#39;x&#39;: &#39;y&#39;}; pass pass y"
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ d.missing }}").render(d=data)
