"""The report's variants page in a real browser: on the newest build, each timed case against the
first by name, per point of a batch sweep, with verdicts and interval bars. Recorded runs with
rewritten timings, stored through the real path into a real SQLite file, rendered by diag report."""

from __future__ import annotations

import browser
import pytest
from conftest import diag_here, recorded_timed, replay

BATCHES = (1, 2, 4)
RUNS = 3


def _history(tmp_path):
    """append_last and mine at batch sizes 1, 2, 4; mine 10% slower at batch 4 only."""
    into, dirs = tmp_path / "runs", []
    for index in range(RUNS):
        for batch in BATCHES:
            for case, slower in (("append_last", 1.0), ("mine", 1.10 if batch == 4 else 1.0)):
                dirs.append(
                    recorded_timed(
                        into,
                        f"{case}-b{batch}-{index}",
                        step_s=1e-3 * batch * slower,
                        seed=index * 10 + batch + (5 if case == "mine" else 0),
                        case=case,
                        config={"batch_size": batch},
                    )
                )
    db = tmp_path / "variants.db"
    replay(dirs, db)
    return db


@pytest.mark.skipif(browser.CHROMIUM is None, reason="Debian's chromium package is not installed")
def test_the_variants_page_gives_each_point_its_verdict_and_draws_the_sweep(tmp_path):
    db = _history(tmp_path)
    out = tmp_path / "site"
    assert diag_here("report", "--db", str(db), "--out", str(out), cwd=tmp_path).returncode == 0
    script = """
      var rows = Array.from(d.querySelectorAll("table.variants tbody tr")).map(function (tr) {
        return Array.from(tr.cells).map(function (td) { return td.textContent.trim(); });
      });
      return {
        heading: d.querySelector("h2").textContent,
        rows: rows,
        charts: Array.from(d.querySelectorAll(".chart")).map(function (c) { return c.getAttribute("aria-label"); }),
        bars: d.querySelectorAll(".chart svg").length,
        nav: Array.from(d.querySelectorAll("nav a")).map(function (a) { return a.textContent; }),
        overflow: d.documentElement.scrollWidth > w.innerWidth + 1
      };
    """
    got = browser.measure(out / "variants.html", 1400, 900, script, tmp_path)
    assert got["heading"] == "mine against append_last"
    verdicts = {(row[0], row[1]): row[5] for row in got["rows"]}
    assert verdicts[("aot_eager fullgraph cpu float32 b4 p8 n4", "compiled")] == "slower", got["rows"]
    assert verdicts[("aot_eager fullgraph cpu float32 b1 p8 n4", "compiled")] == "no difference", got["rows"]
    assert verdicts[("aot_eager fullgraph cpu float32 b2 p8 n4", "eager")] == "no difference", got["rows"]
    assert got["charts"] == [
        "Compiled throughput against batch size, by variant",
        "Compiled peak memory against batch size, by variant",
    ]
    assert got["bars"] == 2 and "Variants" in got["nav"] and not got["overflow"]
    # every page links it; a report of one timed case has no such page and no such link
    front = (out / "index.html").read_text()
    assert 'href="variants.html"' in front
