"""A site that can be published as it is: no page holds an absolute path of the machine that recorded
its runs (its home, its project, its temporary folders), and no link leaves the site. Real recorded
runs replayed into a real SQLite file, the real command line."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from conftest import REPO, diag_here

# a user's own case file and where its error pointed, as another machine would have stored them
ELSEWHERE = "/home/someone/work/proj"


def _site(copied_db: Path, *options: str) -> Path:
    # one run's directory as a run with inductor leaves it: a debug log and a tlparse report
    folder = copied_db.parent / "one.runs" / "run"
    (folder / "tlparse" / "-_0_0_0").mkdir(parents=True, exist_ok=True)
    for name in ("torch_debug.log", "diagnose.jsonl", "tlparse/index.html", "tlparse/-_0_0_0/dynamo_output_graph.txt"):
        (folder / name).write_text("recorded\n")
    with sqlite3.connect(copied_db) as conn:
        conn.execute("UPDATE runs SET artifacts_dir = ? WHERE id = (SELECT max(id) FROM runs)", (str(folder),))
        conn.execute(
            "UPDATE runs SET error_location = ?, error_message = error_message || ? WHERE error_type IS NOT NULL",
            (f"{ELSEWHERE}/cases/mine.py:12", f' (File "{ELSEWHERE}/cases/mine.py", line 12)'),
        )
        conn.execute("UPDATE graph_breaks SET location = ? WHERE location IS NOT NULL", (f"{ELSEWHERE}/m.py:3",))
    conn.close()
    done = diag_here("report", "--db", "copy.db", "--out", "site", *options, cwd=copied_db.parent)
    assert done.returncode == 0, done.stderr
    return copied_db.parent / "site"


def test_no_file_of_the_site_holds_an_absolute_path_of_the_recording_machine(copied_db):
    site = _site(copied_db)
    machine = {str(Path.home()), str(REPO), str(copied_db.parent), "/root/", "/tmp/", ELSEWHERE, "someone"}
    shown = [p for p in site.rglob("*") if p.is_file() and not p.name.startswith(".")]
    assert len(shown) > 5
    for page in shown:
        text = page.read_text(encoding="utf-8")
        for path in machine:
            assert path not in text, f"{page.relative_to(site)} holds {path}"
    front = (site / "index.html").read_text(encoding="utf-8")
    assert "…/cases/mine.py:12" in front


def _links(site: Path) -> list[tuple[Path, str]]:
    return [
        (page, href)
        for page in site.rglob("*.html")
        for href in re.findall(r'(?:href|src)="([^"#]+)', page.read_text(encoding="utf-8"))
    ]


def test_a_run_page_says_its_artifacts_stayed_and_links_none_out_of_the_site(copied_db):
    site = _site(copied_db)
    pages = "".join(p.read_text(encoding="utf-8") for p in (site / "runs").glob("*.html"))
    assert "torch_debug.log" in pages and "diag report --carry-artifacts" in pages
    _inside(site)


def test_carried_artifacts_are_copied_into_the_site_and_linked_there(copied_db):
    site = _site(copied_db, "--carry-artifacts")
    carried = [href for page, href in _links(site) if "/artifacts/" in href]
    assert any(href.endswith("torch_debug.log") for href in carried)
    assert any(href.endswith("tlparse/index.html") for href in carried)
    # what the tlparse page links is carried with it
    assert len(list((site / "artifacts").rglob("dynamo_output_graph.txt"))) == 1
    _inside(site)
    again = diag_here("report", "--db", "copy.db", "--out", "site", "--carry-artifacts", "--json", cwd=copied_db.parent)
    assert '"written": 0' in again.stdout  # copied once: the second report copies nothing again


def _inside(site: Path) -> None:
    for page, href in _links(site):
        if href.startswith(("https://", "http://", "mailto:", "data:")):
            continue
        target = (page.parent / href).resolve()
        assert site.resolve() in target.parents or target == site.resolve(), (page.name, href)
        assert target.exists(), (page.name, href)


def test_a_path_is_shown_without_its_machine_s_home_or_user():
    from diag.pages import public_paths

    assert public_paths("at /home/someone/x.py:3") == "at ~/x.py:3"
    assert public_paths("at /home/someone/work/proj/cases/x.py:3") == "at …/cases/x.py:3"
    assert public_paths("/root/.cache/diag/probe-path/e9d/diag/probe/supervise.py") == "…/probe/supervise.py"
    assert public_paths("/Users/someone/a.py, /tmp/x") == "~/a.py, /tmp/x"
    assert public_paths('File "/usr/lib/python3/site-packages/torch/_dynamo/eval_frame.py"') == (
        'File "torch/_dynamo/eval_frame.py"'
    )
    assert public_paths("https://github.com/pytorch/pytorch/compare/a...b 1/2 work") == (
        "https://github.com/pytorch/pytorch/compare/a...b 1/2 work"
    )
