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


def _profiled_race(db_path, uid, groups_case, groups_base, ms_base, ms_case):
    """A race stored as diag race --profile stores it: mine against append_last, with mine's breakdown
    by op group (what why.explain gives) and the race's own medians per token."""
    from diag import build, store
    from diag.verdicts import race, why

    record = {
        "variants": ["append_last", "mine"],
        "generation_median_s": {"append_last": [ms_base / 1e3] * 12, "mine": [ms_case / 1e3] * 12},
        "errors": {},
    }
    verdicts = race.judge(record, ["append_last", "mine"])
    how = f"append_last's median {ms_base:.3f} ms x (the median ratio of the rounds {ms_case / ms_base:.3f} - 1)"
    found = why.Breakdown("append_last", "mine", 10, False, measured_ms=ms_case - ms_base, measured_how=how)
    found.groups = [
        why.Row(name, groups_case[name], groups_base.get(name, 0.0), groups_case[name] - groups_base.get(name, 0.0),
                None, None, None, False)
        for name in groups_case
    ]  # fmt: skip
    config = {"backend": "eager", "fullgraph": True, "device": "cpu", "dtype": "float32", "batch_size": 1}
    config |= {"prompt_length": 16, "new_tokens": 8}
    sources = {"append_last": "builtin", "mine": "./mine.py"}
    rows = race.stored(uid, "2026-12-03T00:00:00", {}, config, sources, record, verdicts, {"mine": found.as_dict()})
    db = store.open_db(db_path)
    store.save_races(db, build.identity("2.13.0", None, None), rows)
    db.conn.close()


@pytest.mark.skipif(browser.CHROMIUM is None, reason="Debian's chromium package is not installed")
def test_a_group_has_one_colour_in_every_chart_and_the_measured_rest_is_drawn(tmp_path):
    """Two races whose breakdowns hold different groups: each group keeps its colour from chart to
    chart (bars and keys), and each bar ends at the time the race measured, the rest drawn apart."""
    db = tmp_path / "races.db"
    _profiled_race(db, "r1", {"attention": 0.5, "matmuls": 1.0}, {"attention": 0.4, "matmuls": 0.5}, 1.0, 2.5)
    three = {"Python outside any op": 0.4, "attention": 0.6, "matmuls": 0.8}
    _profiled_race(db, "r2", three, {"attention": 0.4, "matmuls": 0.5}, 1.0, 2.2)
    out = tmp_path / "site"
    assert diag_here("report", "--db", str(db), "--out", str(out), cwd=tmp_path).returncode == 0
    script = """
      return Array.from(d.querySelectorAll("svg.stacked")).map(function (chart) {
        var bars = Array.from(chart.querySelectorAll("rect")).filter(function (r) { return r.querySelector("title"); })
          .map(function (r) { return [r.querySelector("title").textContent, getComputedStyle(r).fill]; });
        var keys = Array.from(chart.querySelectorAll("rect.key")).map(function (r) {
          return [r.nextElementSibling.textContent, getComputedStyle(r).fill]; });
        return {bars: bars, keys: keys};
      });
    """
    charts = browser.measure(out / "variants.html", 1400, 900, script, tmp_path)
    assert len(charts) == 2
    colours: dict[str, set[str]] = {}
    for chart in charts:
        for title, fill in chart["bars"]:
            name = title.split(": ", 1)[1].rsplit(" ", 2)[0]
            colours.setdefault(name, set()).add(fill)
        for name, fill in chart["keys"]:
            colours.setdefault(name, set()).add(fill)
    assert {"attention", "matmuls", "Python outside any op", "measured, in no profiled op"} <= set(colours)
    assert all(len(fills) == 1 for fills in colours.values()), colours
    assert len({next(iter(fills)) for fills in colours.values()}) == len(colours)  # and no two share one
    rest = [t for chart in charts for t, _ in chart["bars"] if "measured, in no profiled op" in t]
    # mine: 2.5 measured, 1.5 profiled, in the first race; append_last: 1.0 measured, 0.9 profiled
    assert (
        "mine: measured, in no profiled op 1.000 ms" in rest
        and "append_last: measured, in no profiled op 0.100 ms" in rest
    )


def test_the_page_says_what_the_race_measured_and_which_to_believe_where_runs_disagree(tmp_path):
    db = _history(tmp_path)  # stored runs of mine against append_last
    _profiled_race(db, "r1", {"attention": 0.5, "matmuls": 1.0}, {"attention": 0.4, "matmuls": 0.5}, 1.0, 2.5)
    out = tmp_path / "site"
    assert diag_here("report", "--db", str(db), "--out", str(out), cwd=tmp_path).returncode == 0
    page = (out / "variants.html").read_text()
    assert "The race measured +1.500 ms per token (append_last&#39;s median 1.000 ms x (the median ratio" in page
    assert "where this table and the race above rank two cases differently, the race is the one to believe" in page
