"""Pages of runs: the runs of one case on one build share a page (``runs/<build id>-<case>.html``),
one section each, so a year of nightlies is a few hundred files, not one per run. Every link to a
run, from any page, lands on its section; every run detailed has exactly one section; a night
added makes only the pages whose runs changed."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import browser
import nightly_index
import pytest
from conftest import run_section, site_files

from diag import pages, report, store
from diag.report import inputs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import synthetic  # after sys.path names bench/

NIGHT = len(synthetic.configs())
DETAIL = 3  # the story's regression (nightly 20) and fix (26) are older than its newest 3 nightlies
RUN_LINK = re.compile(r'href="(?:\.\./)?(runs/[^"#]+)#run-(\d+)"')


def _history(path: Path, nights: int = 0) -> None:
    """The first ``nights`` nights of the synthetic year, or without them the story (synthetic.story)."""
    db = store.open_db(path)
    store.save_runs(db, synthetic.records(nights * NIGHT) if nights else synthetic.story())
    db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.conn.close()


def _render(path: Path, out: Path) -> dict[str, str]:
    db = store.open_db(path, readonly=True)
    try:
        return report.render(db, out, detail_builds=DETAIL, processes=1)
    finally:
        db.conn.close()


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("run-pages") / "history.db"
    _history(path)
    return path


def test_every_link_to_a_run_lands_on_its_one_section(history, tmp_path):
    files = _render(history, tmp_path / "site")
    db = store.open_db(history, readonly=True)
    runs = {run["id"]: run for run in store.report_runs(db)}
    listed = {path: page for path, page in files.items() if path.startswith("runs/")}
    sections = {
        int(run_id): path for path, page in listed.items() for run_id in re.findall(r'<section id="run-(\d+)">', page)
    }
    linked = {}
    for name, page in files.items():
        if isinstance(page, str) and name.endswith(".html"):
            for target, run_id in RUN_LINK.findall(page):
                linked[int(run_id)] = target
                assert sections.get(int(run_id)) == target, (name, target, run_id)
    # the newest builds' runs and both sides of the (older) regression and fix: each in one section,
    # on the page of its case and build, and linked from the pages that show it
    assert len(sections) == sum(page.count('<section id="run-') for page in listed.values())
    assert all(pages.run_page(runs[run_id]) == path for run_id, path in sections.items())
    assert linked.keys() == sections.keys()
    builds = {runs[run_id]["torch_build_id"] for run_id in sections}
    assert len(builds) > DETAIL  # older builds with a transition have their sides' pages too
    assert len(listed) == len({(runs[i]["torch_build_id"], runs[i]["case"]) for i in sections})
    assert len(listed) < len(sections)  # a page holds the case's configs of the build: many runs a file


def test_a_page_of_runs_names_its_build_and_lists_its_runs(history, tmp_path):
    files = _render(history, tmp_path / "site")
    db = store.open_db(history, readonly=True)
    newest = max(store.builds(db), key=lambda build: build["nightly_date"])
    run = next(r for r in store.report_runs(db) if r["torch_build_id"] == newest["id"] and r["case"] == "append_last")
    page = files[pages.run_page(run)]
    assert f"<h1>append_last on torch {newest['version']}</h1>" in page
    assert f'<a href="#run-{run["id"]}">#{run["id"]}</a>' in page  # the list at the top links each section
    assert f"<h2>Run #{run['id']}: append_last" in run_section(files, run["id"])


def test_a_night_makes_only_the_pages_whose_runs_changed(tmp_path):
    path, out, scratch = tmp_path / "history.db", tmp_path / "site", tmp_path / "scratch"
    _history(path, 8)
    report.publish(_render(path, out), out, path)
    _history_night = synthetic.records(9 * NIGHT)
    db = store.open_db(path)
    store.save_runs(db, (r for index, r in enumerate(_history_night) if index >= 8 * NIGHT))
    db.conn.close()
    files = _render(path, out)
    made = {name for name, page in files.items() if name.startswith("runs/") and not isinstance(page, inputs.Kept)}
    builds = store.builds(store.open_db(path, readonly=True))
    cases = {config["case"] for config in synthetic.configs()}
    # the new build's pages; the build that left the detailed ones has no page any more
    assert made == {pages.run_page({"torch_build_id": builds[-1]["id"], "case": case}) for case in cases}
    gone = {pages.run_page({"torch_build_id": builds[-1 - DETAIL]["id"], "case": case}) for case in cases}
    assert not gone & files.keys()
    report.publish(files, out, path)
    report.publish(_render(path, scratch), scratch, path)
    assert site_files(out) == site_files(scratch)


@pytest.mark.skipif(browser.CHROMIUM is None, reason="Debian's chromium package is not installed")
def test_a_link_to_a_run_opens_its_section_in_the_browser(history, tmp_path):
    out = tmp_path / "site"
    report.publish(_render(history, out), out, history)
    db = store.open_db(history, readonly=True)
    run = [r for r in store.report_runs(db) if r["case"] == "hf_dynamic_cache"][-2]  # a section down the page
    script = f"""
    var section = d.getElementById("run-{run["id"]}").getBoundingClientRect();
    return {{top: section.top, width: w.innerWidth, scroll: d.documentElement.scrollWidth, y: w.scrollY}};
    """
    got = browser.measure(out / pages.run_page(run), 420, 900, script, tmp_path, f"#run-{run['id']}")
    assert got["y"] > 0 and abs(got["top"]) <= 2, got  # scrolled to the section, which starts at the top
    assert got["scroll"] <= got["width"], got


def test_a_build_whose_wheel_is_recorded_later_makes_its_pages_again(tmp_path):
    """A later run of a build can record the wheel it came from (store.writes): the pages of the
    build's runs show it, so they are made again, and equal a render from scratch."""
    path, out, scratch = tmp_path / "history.db", tmp_path / "site", tmp_path / "scratch"
    _history(path, 2)
    report.publish(_render(path, out), out, path)
    db = store.open_db(path)
    newest = store.builds(db)[-1]
    db.conn.execute(
        "UPDATE torch_builds SET wheel_url = ?, wheel_origin = 'index', wheel_sha256 = ? WHERE id = ?",
        [
            "https://download.pytorch.org/whl/nightly/cpu/torch-2.12.0.dev-cp311-linux_x86_64.whl",
            "ab" * 32,
            newest["id"],
        ],
    )
    db.conn.commit()
    db.conn.close()
    files = _render(path, out)
    made = {name for name, page in files.items() if name.startswith("runs/") and not isinstance(page, inputs.Kept)}
    cases = {config["case"] for config in synthetic.configs()}
    assert made == {pages.run_page({"torch_build_id": newest["id"], "case": case}) for case in cases}
    report.publish(files, out, path)
    report.publish(_render(path, scratch), scratch, path)
    assert site_files(out) == site_files(scratch)


class _StaticHost(nightly_index.QuietHandler):
    """A static host as GitHub Pages is one (mocked: that host cannot be reached from a test): a
    missing address is answered with the site's 404.html, status 404."""

    def send_error(self, code, message=None, explain=None):
        page = Path(self.directory) / "404.html"
        if code != 404 or not page.is_file():
            return super().send_error(code, message, explain)
        body = page.read_bytes()
        self.send_response(404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.skipif(browser.CHROMIUM is None, reason="Debian's chromium package is not installed")
def test_an_old_address_of_a_run_page_leads_to_its_section(history, tmp_path):
    """Alerts filed before named a run's page runs/<id>.html: served from a static host, that address
    now leads to the run's section, and a run no longer detailed says how to see it."""
    site = tmp_path / "site"
    report.publish(_render(history, site), site, history)
    db = store.open_db(history, readonly=True)
    listed = json.loads((site / "run-pages.json").read_text())
    run_id = int(sorted(listed, key=int)[len(listed) // 2])
    older = min(r["id"] for r in store.report_runs(db))
    assert str(older) not in listed
    with nightly_index.Server(site, _StaticHost) as server:
        moved = browser.dom(f"{server.url}/runs/{run_id}.html", tmp_path / "moved")
        gone = browser.dom(f"{server.url}/runs/{older}.html", tmp_path / "gone")
    assert f'<section id="run-{run_id}">' in moved
    assert f"Run #{older} has no page in the report any more: diag show {older}" in gone
