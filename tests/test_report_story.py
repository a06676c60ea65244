"""The report answers its questions on a history built to ask them (bench/synthetic.py ``story``):
31 nightlies x 16 rows, repeats on the newest three, a regression and its fix, a regression on
the newest build, a row that never worked, a flapping row, a batch sweep, a transformers upgrade
and a hostile case name. Real SQLite, the real renderer, and pages opened in headless Chromium."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import browser
import pytest
from conftest import diag, diag_here, run_section, site_files

from diag import pages, report, store
from diag import row as rows
from diag.build import identity
from diag.report import charts
from diag.report.history import build_matrix
from diag.verdicts import gate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import synthetic  # after sys.path names bench/

NEWEST = synthetic.STORY_NIGHTLIES - 1


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    work = tmp_path_factory.mktemp("story")
    db = store.open_db(work / "history.db")
    store.save_runs(db, synthetic.story())
    db.conn.execute("PRAGMA wal_checkpoint(FULL)")
    out = work / "site"
    done = diag("report", "--db", str(work / "history.db"), "--out", str(out), "--json", cwd=work)
    return {"db": db, "path": work / "history.db", "out": out, "counts": json.loads(done.stdout), "work": work}


def _builds(db):
    return {b["version"]: b for b in store.builds(db)}


def _nightly(db, day: int) -> dict:
    return sorted(store.builds(db), key=lambda b: b["nightly_date"])[day]


def _verdict(story, case, fullgraph):
    machine = json.loads((story["out"] / "report.json").read_text())
    return next(v for v in machine["verdicts"] if v["case"] == case and v["fullgraph"] == fullgraph)


def test_the_answer_per_case_names_first_bad_build_fix_and_error(story):
    db = story["db"]
    append = _verdict(story, "append_last", 1)
    assert append["first_bad"] == _nightly(db, synthetic.REGRESSED)["version"]
    assert append["fixed_in"] == _nightly(db, synthetic.FIXED)["version"]
    newest = _verdict(story, "hf_static_cache", 1)
    assert newest["state"] == "partly" and newest["first_bad"] == _nightly(db, NEWEST)["version"]
    assert newest["fixed_in"] is None and newest["errors"] == ["Unsupported: Dynamic slicing with Tensor arguments"]
    never = _verdict(story, "dynamic_slice", 1)
    assert never["state"] == "fails" and never["since"] == _nightly(db, 0)["version"]
    front = (story["out"] / "index.html").read_text()
    verdicts = front[front.index('id="verdicts"') : front.index("</table>", front.index('id="verdicts"'))]
    # the error, the first bad build and the GitHub range of commits between it and the last good one
    assert "VariableBuilder.__init__() got an unexpected keyword argument &#39;guards&#39;" in verdicts
    last_good, first_bad = _nightly(db, synthetic.REGRESSED - 1), _nightly(db, synthetic.REGRESSED)
    assert f"compare/{last_good['git_version']}...{first_bad['git_version']}" in verdicts
    assert verdicts.index("append_last") < verdicts.index("dynamic_slice")


def test_newest_regression_leads_the_transitions_and_none_is_dropped(story):
    db = story["db"]
    matrix = build_matrix(store.builds(db), store.report_runs(db), store.finding_keys(db))
    # the newest nightly's two regressions lead: hf_static_cache's, and append_last's crash among repeats
    newest = [t for t in matrix.transitions[:2] if t.first_after["id"] == _nightly(db, NEWEST)["id"]]
    assert sorted((t.kind, t.row.case, t.row.backend, t.row.fullgraph, t.status_after) for t in newest) == [
        ("regression", "append_last", "aot_eager", 0, "crash"),
        ("regression", "hf_static_cache", "inductor", 1, "fullgraph_error"),
    ]
    page = (story["out"] / "transitions.html").read_text()
    assert page.count("<tr data-case=") == len(matrix.transitions) + len(matrix.key_changes)
    assert "started failing" in page and "flaky lowering" in page
    # the transformers upgrade is named beside the transition it coincides with, and only there
    upgraded = [t for t in matrix.transitions if t.environment]
    assert [(t.row.case, t.first_after["id"]) for t in upgraded] == [
        ("hf_dynamic_cache", _nightly(db, synthetic.UPGRADE)["id"])
    ]
    assert upgraded[0].environment == "transformers 4.56.2 -> 4.57.0" and "also changed: transformers 4.56.2" in page
    assert matrix.transformers[_nightly(db, synthetic.UPGRADE - 1)["id"]] == ["4.56.2"]
    assert matrix.transformers[_nightly(db, synthetic.UPGRADE)["id"]] == ["4.57.0"]
    older = (story["out"] / "matrix-1.html").read_text()
    assert "transformers 4.56.2</span>" in older  # each build's column names the transformers its runs used
    assert "Python 3.11</span>" in older  # and the Python, not only on run pages


def test_each_row_is_the_row_check_compares_and_every_run_of_a_cell_counts(story):
    db = story["db"]
    runs = store.report_runs(db)
    matrix = build_matrix(store.builds(db), runs, {})
    assert set(matrix.rows) == {rows.of(r) for r in runs}
    newest = _nightly(db, NEWEST)
    checked = gate.check(db, None, gate.regress.Thresholds(), set())
    assert {c.row for c in checked.comparisons} <= set(matrix.rows)
    batch1 = next(
        r
        for r in matrix.rows
        if r.case == "append_last" and r.backend == "aot_eager" and r.fullgraph and r.batch_size == 1
    )
    assert matrix.cell(batch1, newest["id"]).run["status"] == "pass"  # the batch-8 sweep point is its own row
    assert matrix.cell(batch1._replace(batch_size=8), newest["id"]).run["status"] == "compile_error"
    flaky = next(r for r in matrix.rows if r.case == "append_last" and r.backend == "aot_eager" and not r.fullgraph)
    cell = matrix.cell(flaky, newest["id"])
    assert [r["status"] for r in cell.runs] == ["crash", "compile_error", "graph_break"]
    assert (cell.tally, cell.worst) == ("1/3 work", "crash")
    front = (story["out"] / "index.html").read_text()
    assert "1/3 work · worst crash" in front
    for run in cell.runs:
        assert f'href="{pages.run_href(run)}"' in front and run_section(story["out"], run["id"])


def test_a_torch_built_for_two_variants_makes_two_lines_and_a_verdict_is_one_history_across_them(tmp_path):
    db = store.open_db(tmp_path / "h.db")
    store.save_runs(db, synthetic.story(nightlies=3))
    cpu = _nightly(db, 2)
    rng = synthetic.random.Random(1)
    cuda = identity(cpu["version"].split("+")[0] + "+cu126", "c" * 40, "12.6")
    old = identity("2.0.1+cu117", "e" * 40, "11.7")
    row = {"case": "dynamic_slice", "backend": "inductor", "fullgraph": 1, "dtype": "float32"}
    gone = {"case": "old_only", "backend": "inductor", "fullgraph": 1, "dtype": "float32"}
    store.save_runs(
        db,
        [
            synthetic.record(cuda, "cuda-pass", row, "pass", rng),
            synthetic.record(old, "old-fail", row, "compile_error", rng),
            synthetic.record(old, "old-only", gone, "compile_error", rng),
        ],
    )
    matrix = build_matrix(store.builds(db), store.report_runs(db), {})
    # the same torch for CPU (fails) and CUDA (passes), side by side: no "fix"
    assert not [t for t in matrix.transitions if t.row.case == "dynamic_slice"]
    # one line per case and mode, not per variant: its strip names every variant's builds
    (line,) = [v for v in matrix.verdicts if v.case == "dynamic_slice" and v.fullgraph]
    assert line.variant is None
    assert {cuda["version"], cpu["version"], "2.0.1+cu117"} <= {b["version"] for b, _, _ in line.strip}
    (stale,) = [v for v in matrix.verdicts if v.case == "old_only"]
    assert stale.newest["version"] == "2.0.1+cu117" and stale.state == "fails"
    front = report.render(db, tmp_path / "site")["index.html"]
    stale_line = front[front.index('<tr data-case="old_only"') :].split("</tr>")[0]
    assert "last seen" in stale_line and "2.0.1+cu117" in stale_line


def test_rendering_unchanged_data_changes_no_file(story, tmp_path):
    first = report.render(story["db"], story["out"])
    assert report.render(story["db"], story["out"]) == first
    mtimes = {p: p.stat().st_mtime_ns for p in story["out"].rglob("*") if p.is_file()}
    done = diag("report", "--db", str(story["path"]), "--out", str(story["out"]), "--json", cwd=tmp_path)
    assert json.loads(done.stdout)["written"] == 0
    assert {p: p.stat().st_mtime_ns for p in story["out"].rglob("*") if p.is_file()} == mtimes


def test_out_refuses_a_folder_that_is_not_a_diag_report(story, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    done = diag("report", "--db", str(story["path"]), "--out", str(mine), check=False, cwd=tmp_path)
    assert done.returncode == 1 and "holds no diag report" in done.stderr and len(done.stderr.splitlines()) == 1
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_bidi_controls_and_markup_in_names_are_shown_not_obeyed(story):
    for page in story["out"].rglob("*.html"):
        text = page.read_text()
        assert "\u202e" not in text, page
    assert "&lt;U+202E&gt;gnirts&lt;U+202C&gt; &lt;b&gt;$x^2$&lt;/b&gt;" in (story["out"] / "index.html").read_text()
    hostile = next(
        p
        for p in (story["out"] / "cases").iterdir()
        if "gnirts" in p.name or "U_202E" in p.name or p.name.startswith("_")
    )
    assert "<svg" in hostile.read_text()  # "$x^2$" is plotted as text, not parsed as mathtext


def test_architectures_have_their_own_page_with_what_blocks_each(story):
    page = (story["out"] / "architectures.html").read_text()
    assert "1 of 2 architectures compile fullgraph" in page
    gemma = page[page.index("<strong>gemma3</strong>") :].split("</tr>")[0]
    assert "Unsupported: Data-dependent branching" in gemma and "Unsupported Tensor.item() call" in gemma
    assert "<strong>llama</strong>" in page
    front = (story["out"] / "index.html").read_text()
    assert 'id="verdicts"' in front and "hf:gemma3" not in front.split('id="verdicts"')[1].split("</table>")[0]
    assert "1 of 2 compile fullgraph on their newest build" in front


def test_key_changes_name_the_break_and_link_its_documentation(story):
    page = (story["out"] / "transitions.html").read_text()
    assert "Unsupported Tensor.item() call with capture_scalar_outputs=False" in page
    assert 'href="https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0124.html"' in page


def test_charts_are_small_multiples_with_gaps_and_a_whole_history_overview(story, tmp_path):
    db = story["db"]
    matrix = build_matrix(store.builds(db), store.report_runs(db), {})
    drawn = dict(charts.case_charts(matrix, "append_last"))
    compiled = drawn["Compiled per-token latency"]
    for panel in ("inductor fullgraph", "aot_eager no-fullgraph"):
        assert panel in compiled
    assert "whole history" not in " ".join(drawn)  # 31 builds: all in detail
    regressed = next(r for r in matrix.rows if r.case == "append_last" and r.backend == "inductor" and r.fullgraph)
    cells = [matrix.cell(regressed, build["id"]) for build in matrix.builds]
    values = [found[1] if (found := charts.cell_values(cell)) else [] for cell in cells]  # compiled latency
    assert [bool(v) for v in values].count(False) == synthetic.FIXED - synthetic.REGRESSED  # a gap, not a bridge
    long = tmp_path / "long.db"
    longdb = store.open_db(long)
    store.save_runs(longdb, synthetic.records(96 * (charts.DETAIL_BUILDS + 5)))
    big = build_matrix(store.builds(longdb), store.report_runs(longdb), {})
    titles = [title for title, _ in charts.case_charts(big, "dynamic_slice")]
    assert "Compile time, whole history" in titles


def test_latest_status_view_is_the_newest_run_of_each_row_and_build(story):
    db = story["db"]
    latest = list(db.query('SELECT id, torch_version, "case", batch_size, status FROM latest_status'))
    runs = store.report_runs(db)
    newest = {}
    for run in runs:
        newest[(rows.of(run), run["torch_build_id"])] = run["id"]
    assert sorted(r["id"] for r in latest) == sorted(newest.values())
    metadata = json.loads((story["out"] / "datasette.json").read_text())
    tables = metadata["databases"]["history"]["tables"]
    assert tables["torch_builds"]["label_column"] == "version"
    for table, spec in tables.items():
        assert table in db.table_names() + db.view_names(), table
        known = {c.name for c in (db[table].columns if table in db.table_names() else db[table].columns)}
        assert set(spec["columns"]) <= known, (table, set(spec["columns"]) - known)


SCRIPT_FRONT = """
var r = {width: w.innerWidth, height: w.innerHeight, scroll: d.documentElement.scrollWidth};
var nav = d.querySelector("nav"); r.navOverflow = nav.scrollWidth - nav.clientWidth;
var box = function (el) { var b = el.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
r.newestBuild = box(d.querySelector("#verdicts thead th:nth-child(2) .build"));
r.matrixNewest = d.querySelector("#matrix thead th:nth-child(2) .build").textContent.trim();
var row = d.querySelector('#verdicts tr[data-case="append_last"]');
r.firstBad = box(row.querySelector(".first-bad")); r.firstBadText = row.querySelector(".first-bad").textContent;
var code = row.querySelector("code"); r.error = box(code); r.errorText = code.textContent;
return r;
"""


@pytest.mark.skipif(browser.CHROMIUM is None, reason="Debian's chromium package is not installed")
@pytest.mark.parametrize("width", [1400, 420])
def test_front_page_answers_above_the_fold(story, width, tmp_path):
    db, height = story["db"], 1000
    got = browser.measure(story["out"] / "index.html", width, height, SCRIPT_FRONT, tmp_path)
    assert got["scroll"] <= got["width"], got  # no page wider than the window
    assert got["navOverflow"] <= 0
    newest, first_bad = _nightly(db, NEWEST)["version"], _nightly(db, synthetic.REGRESSED)["version"]
    assert got["matrixNewest"] == newest  # the matrix starts at the newest build
    assert got["firstBadText"] == first_bad and "guards" in got["errorText"]
    for name in ("newestBuild", "firstBad", "error"):
        left, top, right, bottom = got[name]
        assert 0 <= left and right <= width and 0 <= top and bottom <= height, (name, got[name])


@pytest.mark.skipif(browser.CHROMIUM is None, reason="Debian's chromium package is not installed")
def test_screenshot_shows_the_failing_builds_in_colour(story, tmp_path):
    from PIL import Image

    shot = browser.screenshot(story["out"] / "index.html", 1400, 1000, tmp_path / "front.png", tmp_path / "p")
    image = Image.open(shot).convert("RGB")
    colours = {colour for _, colour in image.getcolors(maxcolors=1 << 20)}
    for hex_colour in ("#cf222e", "#d4a72c", "#1f883d"):  # fails, partly, works squares of the strips
        assert tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)) in colours, hex_colour


@pytest.mark.skipif(browser.CHROMIUM is None, reason="Debian's chromium package is not installed")
@pytest.mark.parametrize("width", [1400, 420])
def test_no_page_is_wider_than_the_window(story, width, tmp_path):
    out = story["out"]
    hostile = store.get_run(
        story["db"], next(r["id"] for r in store.report_runs(story["db"]) if r["uid"] == "story-hostile")
    )
    checked = [
        out / "transitions.html",
        out / "cases" / "append_last.html",
        out / pages.run_page(hostile),
        out / "matrix-1.html",
        out / "architectures.html",
    ]
    for number, page in enumerate(checked):
        got = browser.measure(
            page, width, 900, "return [w.innerWidth, d.documentElement.scrollWidth];", tmp_path / str(number)
        )
        assert got[1] <= got[0], (page.name, got)


@pytest.mark.skipif(browser.CHROMIUM is None, reason="Debian's chromium package is not installed")
def test_transition_filters_work_in_the_browser(story, tmp_path):
    script = """
    var set = function (id, v) { var el = d.getElementById(id); el.value = v; el.dispatchEvent(new w.Event("input")); };
    var shown = function () { return Array.prototype.filter.call(d.querySelectorAll("#transitions tbody tr"),
        function (r) { return r.style.display !== "none"; })
        .map(function (r) { return r.dataset.case + " " + r.dataset.kind; }); };
    var all = shown().length; set("f-case", "hf_static_cache"); set("f-kind", "regression");
    return {all: all, filtered: shown(), count: d.getElementById("f-count").textContent};
    """
    got = browser.measure(story["out"] / "transitions.html", 1400, 900, script, tmp_path)
    assert got["all"] > 3 and got["filtered"] == ["hf_static_cache regression"], got


@pytest.mark.slow
@pytest.mark.skipif(browser.CHROMIUM is None, reason="Debian's chromium package is not installed")
def test_a_year_of_nightlies_answers_above_the_fold_too(tmp_path):
    """The scale benchmark's history (520 nightlies x 96 rows): the same questions, above the fold."""
    db = store.open_db(tmp_path / "year.db")
    store.save_runs(db, synthetic.records(520 * len(synthetic.configs())))
    db.conn.execute("PRAGMA wal_checkpoint(FULL)")
    out = tmp_path / "site"
    diag("report", "--db", str(tmp_path / "year.db"), "--out", str(out), cwd=tmp_path, timeout=600)
    script = """
    var box = function (el) { var b = el.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
    var row = d.querySelector('#verdicts tr[data-case="dynamic_slice"]');
    return {width: w.innerWidth, scroll: d.documentElement.scrollWidth,
            newest: box(d.querySelector("#verdicts thead th:nth-child(2) .build")),
            newestText: d.querySelector("#verdicts thead th:nth-child(2) .build").textContent,
            state: row.querySelector(".state").textContent, error: box(row.querySelector("code")),
            errorText: row.querySelector("code").textContent};
    """
    got = browser.measure(out / "index.html", 1400, 1000, script, tmp_path)
    newest = max(store.builds(db), key=lambda b: b["nightly_date"])
    # the synthetic history's sliced cache fails with fullgraph on every nightly: never worked, not a regression
    assert got["newestText"] == newest["version"] and "never worked" in got["state"]
    assert got["errorText"] == ": ".join(synthetic.SLICE_ERROR) and got["scroll"] <= got["width"]
    for name in ("newest", "error"):
        left, top, right, bottom = got[name]
        assert 0 <= left and right <= 1400 and 0 <= top and bottom <= 1000, (name, got[name])
    builds = len(store.builds(db))
    pages = sorted(out.glob("matrix-*.html"))
    assert len(pages) == builds // report.BUILDS_PER_PAGE  # every whole 25 builds, and the newest on the front


def test_a_cell_with_failing_repeats_is_flaky_and_the_verdict_line_names_its_worst_failure(story):
    """On the newest nightly append_last aot_eager no-fullgraph crashed, errored, then passed: the
    verdict is not "works, never failed" but flaky, with how many runs failed and the worst error."""
    verdict = _verdict(story, "append_last", 0)
    assert (verdict["state"], verdict["runs_failed"], verdict["runs"]) == ("flaky", 2, 6)
    assert verdict["errors"][0] == "Signal: SIGSEGV"
    front = (story["out"] / "index.html").read_text()
    line = front[front.index('<tr data-case="append_last" data-state="flaky"') :]
    line = line[: line.index("</tr>")]
    assert "flaky" in line and "2 of 6 runs failed: Signal: SIGSEGV" in line and "never failed" not in line


def test_the_same_runs_stored_in_either_order_give_the_same_verdicts_and_the_same_gate(tmp_path):
    """Two CI legs finish in either order: the front page and the gate must not flip with them."""
    records = list(synthetic.story())
    outcomes = []
    for name, order in (("forward", records), ("backward", list(reversed(records)))):
        work = tmp_path / name
        work.mkdir()
        db = store.open_db(work / "history.db")
        store.save_runs(db, order)
        db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.conn.close()
        assert diag_here("report", "--db", "history.db", "--out", "site", cwd=work).returncode == 0
        checked = diag_here("check", "--db", "history.db", "--json", cwd=work)
        verdicts = json.loads((work / "site" / "report.json").read_text())["verdicts"]
        gate_said = json.loads(checked.stdout)
        outcomes.append((verdicts, checked.returncode, sorted((r["row"], r["kind"]) for r in gate_said["regressions"])))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][1] == 1 and ("append_last", "status") in [(row.split()[0], kind) for row, kind in outcomes[0][2]]


def test_a_row_that_keeps_flipping_is_marked_flaky_with_its_count(story):
    """The flapping row's history is many episodes, not one regression: the verdict line and the
    transitions page say it flipped, and how often."""
    flapping = _verdict(story, "hf_dynamic_cache", 0)
    assert flapping["flips"] >= 4, flapping
    steady = _verdict(story, "append_last", 1)  # one regression and its fix: two transitions, no mark
    assert steady["flips"] == 2
    front = (story["out"] / "index.html").read_text()
    line = front[front.index('<tr data-case="hf_dynamic_cache" data-state') :]
    line = line[line.index("no-fullgraph") :]
    assert f"flaky: flipped {flapping['flips']} times" in line[: line.index("</tr>")]
    transitions = (story["out"] / "transitions.html").read_text()
    assert transitions.count(f"flaky row: {flapping['flips']} transitions in the history") == flapping["flips"]
    assert "flaky: flipped" not in front[front.index('<tr data-case="append_last"') :].split("</tr>")[0]


@pytest.mark.slow  # four renders of a 15-night history
def test_a_night_later_only_what_changed_is_rendered_and_the_site_is_what_a_full_render_makes(tmp_path):
    """Run pages are made once (their inputs: the run, whether prune compacted it, its run directory,
    the navigation and the code); a re-render keeps them, and the site it leaves is byte for byte the
    one a render from scratch makes."""
    from diag.report import inputs

    per_night = len(synthetic.configs())
    every = list(synthetic.records(per_night * 15))
    db = store.open_db(tmp_path / "history.db")
    store.save_runs(db, every[: per_night * 14])
    db.execute("UPDATE runs SET capabilities = '{}'")  # what a real probe records, and prune clears
    site, fresh = tmp_path / "site", tmp_path / "fresh"
    report.publish(report.render(db, site), site)
    store.save_runs(db, every[per_night * 14 :])  # one new night
    db.execute("UPDATE runs SET capabilities = '{}' WHERE capabilities IS NULL")
    files = report.render(db, site)
    kept = [path for path, content in files.items() if isinstance(content, inputs.Kept)]
    run_pages = [path for path in files if path.startswith("runs/")]
    assert len(kept) >= len(run_pages) * 0.9, (len(kept), len(run_pages))  # the pages of 14 builds of 15
    report.publish(files, site)
    report.publish(report.render(db, fresh), fresh)

    assert site_files(site) == site_files(fresh)
    # the page of a compacted run is made again (prune changes what it shows), and only those
    store.prune(db, keep_builds=5, keep_runs=10, thin_after=1000)
    compacted = {
        pages.run_page(run) for run in db.query('SELECT torch_build_id, "case" FROM runs WHERE capabilities IS NULL')
    }
    again = report.render(db, site)
    rendered = {p for p, c in again.items() if p.startswith("runs/") and not isinstance(c, inputs.Kept)}
    assert rendered and rendered == compacted & again.keys()
    report.publish(again, site)
    report.publish(report.render(db, fresh), fresh)
    assert site_files(site) == site_files(fresh)


@pytest.mark.skipif(browser.CHROMIUM is None, reason="Debian's chromium package is not installed")
@pytest.mark.parametrize("width", [1400, 420])
def test_case_charts_draw_in_the_browser_within_the_window(story, width, tmp_path):
    script = """
    var charts = Array.from(d.querySelectorAll(".chart svg"));
    var latency = Array.from(d.querySelectorAll(".chart")).find(function (c) {
        return c.getAttribute("aria-label") === "Compiled per-token latency"; });
    var panel = Array.from(latency.querySelectorAll("g.panel")).find(function (g) {
        return g.dataset.title === "inductor fullgraph"; });
    return {width: w.innerWidth, scroll: d.documentElement.scrollWidth,
            boxes: charts.map(function (s) { var b = s.getBoundingClientRect(); return [b.left, b.right, b.height]; }),
            lines: charts.map(function (s) { return s.querySelectorAll("path.line").length; }),
            segments: Array.from(panel.querySelectorAll("g.series")).map(function (g) {
                return [g.dataset.label, g.querySelectorAll("path.line").length]; }),
            legend: Array.from(latency.querySelectorAll("g.legend text")).map(function (t) {
                var b = t.getBoundingClientRect(), s = latency.querySelector("svg").getBoundingClientRect();
                return b.right <= s.right + 1; })};
    """
    got = browser.measure(story["out"] / "cases" / "append_last.html", width, 900, script, tmp_path)
    assert got["scroll"] <= got["width"] and len(got["boxes"]) >= 4, got
    for left, right, height in got["boxes"]:
        assert 0 <= left and right <= width and height > 50
    assert all(got["lines"]) and all(got["legend"])
    # the row that regressed has no value while it failed: its line is drawn in two pieces
    assert 2 in [pieces for _, pieces in got["segments"]], got["segments"]


@pytest.mark.skipif(browser.CHROMIUM is None, reason="Debian's chromium package is not installed")
def test_a_cell_whose_runs_differ_in_python_or_transformers_shows_each_side(tmp_path):
    """One row on one build, run by two CI legs: Python 3.10 passed, Python 3.11 failed. The cell is
    decided by the failure (whatever order the legs finished in), and it shows which side failed."""
    rng = random.Random(0)
    build = synthetic.nightly(0, rng)
    row = synthetic.configs()[0]
    legs = [
        synthetic.record(build, "leg-310", row, "pass", rng),
        synthetic.record(build, "leg-311", row, "fullgraph_error", rng, synthetic.SLICE_ERROR),
        synthetic.record(build, "leg-311-tf", row, "pass", rng, transformers="4.56.2"),
    ]
    legs[0].run["python"] = "3.10.14"
    db = store.open_db(tmp_path / "h.db")
    store.save_runs(db, legs)
    db.conn.close()
    out = tmp_path / "site"
    assert diag_here("report", "--db", "h.db", "--out", "site", cwd=tmp_path).returncode == 0
    script = """
    var cell = d.querySelector("#matrix tbody td.cell");
    return {badge: cell.querySelector(".badge").textContent,
            split: Array.from(cell.querySelectorAll(".split")).map(function (s) { return s.textContent; }),
            width: w.innerWidth, scroll: d.documentElement.scrollWidth};
    """
    got = browser.measure(out / "index.html", 420, 900, script, tmp_path)
    assert got["badge"] == "fullgraph_error"
    assert got["split"] == [
        "Python 3.10, transformers 4.57.0: pass",
        "Python 3.11, transformers 4.56.2: pass",
        "Python 3.11, transformers 4.57.0: fullgraph_error",
    ], got
    assert got["scroll"] <= got["width"]
    cells = json.loads((out / "report.json").read_text())["rows"][0]["cells"]
    (only,) = cells.values()
    assert [side[0] for side in only["split"]] == [s.split(":")[0] for s in got["split"]]


def test_a_history_that_changes_variant_from_release_to_release_has_its_transitions(tmp_path):
    """Releases recorded as they were published: 2.0.1 for CUDA 11.7 (fails), 2.1.0 for CUDA 12.1
    (passes), 2.13.0 for the CPU. The front page says "fixed in 2.1.0+cu121"; the transitions say the
    same, naming what else changed, and do not read "no row changed"."""
    db = store.open_db(tmp_path / "h.db")
    rng = synthetic.random.Random(2)
    row = {"case": "append_last", "backend": "eager", "fullgraph": 1, "dtype": "float32"}
    builds = [
        (identity("2.0.1+cu117", "a" * 40, "11.7"), "compile_error", "3.10.13"),
        (identity("2.1.0+cu121", "b" * 40, "12.1"), "pass", "3.11.7"),
        (identity("2.13.0+cpu", "c" * 40, None), "pass", "3.11.7"),
    ]
    made = []
    for build, status, python in builds:
        record = synthetic.record(build, f"{build['version']}-run", row, status, rng)
        record.run["python"] = python
        made.append(record)
    store.save_runs(db, made)
    matrix = build_matrix(store.builds(db), store.report_runs(db), {})
    (fix,) = matrix.transitions
    assert (fix.kind, fix.last_before["version"], fix.first_after["version"]) == ("fix", "2.0.1+cu117", "2.1.0+cu121")
    assert fix.environment.startswith("cu117 -> cu121, Python 3.10.13 -> 3.11.7"), fix.environment
    site = report.render(db, tmp_path / "site")
    assert "No row changed" not in site["transitions.html"] and "2.1.0+cu121" in site["transitions.html"]
    assert "fixed in" in site["index.html"] and "also changed: cu117 -&gt; cu121" in site["transitions.html"]
