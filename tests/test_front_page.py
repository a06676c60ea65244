"""The front page says how a row works, tells a row that never worked from a regression, and gives a
failing run's file:line with a link to its page. Real SQLite files, the real renderer."""

from __future__ import annotations

import json

from factories import run_record, stored

from diag import report, store
from diag.build import identity

OLD, NEW = identity("2.12.0+cpu", "a" * 40, None), identity("2.13.0+cpu", "b" * 40, None)
AT = "/home/someone/project/cases/my_cache.py:41"


def _line(front: str, case: str, fullgraph: int) -> str:
    mode = "fullgraph" if fullgraph else "no-fullgraph"
    start = front.index(f'<tr data-case="{case}"')
    rows = front[start:].split("</tr>")
    return next(row for row in rows if f'<span class="muted">{mode}' in row)


def _history(path):
    for build, uid in ((OLD, "o"), (NEW, "n")):
        # works without fullgraph, but pays for it: five breaks and a recompile at each of its 5 decode steps
        stored(
            path,
            run_record(
                build=build,
                uid=uid + "1",
                case="dynamic_slice",
                fullgraph=0,
                status="graph_break",
                new_tokens=6,
                graph_break_count=5,
                recompile_count=6,
                decode_recompile_steps=5,
            ),
        )
        # has failed with fullgraph on every build it ran: never worked, not a regression
        stored(
            path,
            run_record(
                build=build,
                uid=uid + "2",
                case="dynamic_slice",
                status="fullgraph_error",
                error_type="UserError",
                error_message="Could not guard on data-dependent expression",
                error_location=AT,
            ),
        )
    # worked on the old build and fails on the new one: a regression
    stored(path, run_record(build=OLD, uid="o3", case="append_last", status="pass"))
    stored(
        path,
        run_record(
            build=NEW,
            uid="n3",
            case="append_last",
            status="compile_error",
            error_type="TypeError",
            error_message="VariableBuilder.__init__() got an unexpected keyword argument 'guards'",
            error_location=AT,
        ),
    )


def test_the_front_page_says_how_a_row_works_and_never_worked_apart_from_a_regression(tmp_path):
    _history(tmp_path / "h.db")
    front = report.render(store.open_db(tmp_path / "h.db"), tmp_path / "site")["index.html"]
    paying = _line(front, "dynamic_slice", 0)
    assert "works" in paying and "with 5 graph breaks; recompiles at every decode step" in paying
    never = _line(front, "dynamic_slice", 1)
    assert "never worked" in never and "still failing" not in never and "first build" not in never
    regressed = _line(front, "append_last", 1)
    assert "never worked" not in regressed and "still failing" in regressed


def test_a_failing_row_gives_its_run_s_file_and_line_and_links_its_page_without_the_machine_s_path(tmp_path):
    _history(tmp_path / "h.db")
    files = report.render(store.open_db(tmp_path / "h.db"), tmp_path / "site")
    front = files["index.html"]
    for case in ("append_last", "dynamic_slice"):
        line = _line(front, case, 1)
        assert "at <code>/home/someone/project/cases/my_cache.py:41</code>" in line, line
        href = line.split('failing-run">')[1].split('href="')[1].split('"')[0]
        assert href.split("#")[0] in files and f'id="{href.split("#")[1]}"' in files[href.split("#")[0]]


def test_report_json_says_the_same(tmp_path):
    _history(tmp_path / "h.db")
    files = report.render(store.open_db(tmp_path / "h.db"), tmp_path / "site")
    verdicts = {(v["case"], v["fullgraph"]): v for v in json.loads(files["report.json"])["verdicts"]}
    assert verdicts[("dynamic_slice", 0)]["how"] == "5 graph breaks; recompiles at every decode step"
    assert verdicts[("dynamic_slice", 1)]["never_worked"] and verdicts[("dynamic_slice", 1)]["first_bad"] is None
    regressed = verdicts[("append_last", 1)]
    assert not regressed["never_worked"] and regressed["first_bad"] == "2.13.0+cpu"
    assert regressed["failing_run"]["at"] == AT
