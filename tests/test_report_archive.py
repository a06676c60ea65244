"""The matrix's archive pages: ``matrix-K.html`` holds the K-th whole chunk of builds counted from
the oldest, so a night added to the history leaves the older pages as they were, and a re-render
skips them; yet whatever an archive page shows, changed in the DB, makes it again. Each re-render
here is compared, byte for byte, with a render from scratch of the same DB."""

from __future__ import annotations

import json
import random
import re
import sqlite3
import sys
from pathlib import Path
from typing import Iterable

import pytest
from conftest import site_files

from diag import report, store
from diag.report import inputs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import synthetic  # after sys.path names bench/

PER_PAGE = 3
NIGHT = len(synthetic.configs())


def _publish(path: Path, out: Path, per_page: int = PER_PAGE, detail: int = 4) -> dict[str, str]:
    """Render the DB at ``path`` into ``out`` in this process (``per_page`` builds a page, the newest
    ``detail`` builds with run pages); the files the render made (Kept ones are not)."""
    db = store.open_db(path, readonly=True)
    try:
        files = report.render(db, out, builds_per_page=per_page, detail_builds=detail, processes=1)
    finally:
        db.conn.close()
    report.publish(files, out, path)
    return {name: content for name, content in files.items() if not isinstance(content, inputs.Kept)}


def _save(path: Path, records: Iterable[store.RunRecord]) -> None:
    """``records`` stored in the DB at ``path``, its WAL written into the file."""
    db = store.open_db(path)
    store.save_runs(db, records)
    db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.conn.close()


def _history(path: Path, nights: int) -> None:
    _save(path, synthetic.records(nights * NIGHT))


def _add_night(path: Path, nights: int) -> None:
    """The night after the first ``nights``, as the synthetic history makes it."""
    records = synthetic.records((nights + 1) * NIGHT)
    _save(path, (record for index, record in enumerate(records) if index >= nights * NIGHT))


def _same_as_from_scratch(path: Path, out: Path, scratch: Path, detail: int = 4) -> None:
    _publish(path, scratch, detail=detail)
    assert site_files(out) == site_files(scratch)


@pytest.mark.slow  # renders a history night by night: a property run, not a unit
@pytest.mark.parametrize("detail", [4, 1])
def test_a_night_leaves_the_whole_archive_pages_before_it_alone(tmp_path, monkeypatch, detail):
    """Also on the nights a page joins the archive: the page before it gains a link to it, and the
    others, which name only it, the front page and the pages older than they are, stay as they were.
    No night starts again from scratch: each reads the runs of the newest builds alone. With run
    pages on the newest build alone, fewer than a page holds, as well."""
    path, out = tmp_path / "history.db", tmp_path / "site"
    read = counted_reads(monkeypatch)
    _history(path, 10)
    _publish(path, out, detail=detail)
    for nights in range(10, 16):
        before = site_files(out)
        _add_night(path, nights)
        read.clear()
        made = _publish(path, out, detail=detail)
        builds = nights + 1
        whole = builds // PER_PAGE
        assert sorted(p.name for p in out.glob("matrix-*.html")) == sorted(
            f"matrix-{k}.html" for k in range(1, whole + 1)
        )
        # the page of the build whose runs lost their pages (no longer among the newest), the newest
        # whole one, and where a page joined, the one before it are made again; the others are
        # neither made nor changed
        moved = {
            f"matrix-{(builds - detail - 1) // PER_PAGE + 1}.html",
            f"matrix-{whole}.html",
            f"matrix-{whole - 1}.html",
        }
        older = {f"matrix-{k}.html" for k in range(1, whole + 1)} - moved
        assert older, "no page the night leaves alone"
        assert not older & set(made), sorted(made)
        assert all(site_files(out)[name] == before[name] for name in older)
        assert len(read) == 1 and read[0] < builds * NIGHT, read  # taken up, not from scratch
        _same_as_from_scratch(path, out, tmp_path / f"scratch-{nights}", detail)


def _night_with_rows(path: Path, nights: int, dtypes: list[str]) -> None:
    """The night after the first ``nights``, with its first run run again in each of ``dtypes`` too:
    a row of a case the history has, in a config it has not."""
    records = list(synthetic.records((nights + 1) * NIGHT))[nights * NIGHT :]
    row = json.loads(records[0].run["config"])
    for dtype in dtypes:
        records.append(synthetic.record(records[0].build, f"{dtype}-{nights}", {**row, "dtype": dtype}, "pass",
                                        random.Random(nights)))  # fmt: skip
    _save(path, records)


def _shows(page: Path, dtype: str) -> bool:
    """Whether the matrix on ``page`` has a row in ``dtype``."""
    rows = re.findall(r'<tr data-filter="([^"]*)"', page.read_text())
    return any(dtype in row.split() for row in rows)


def test_an_archive_page_shows_the_rows_run_on_its_builds_and_a_new_row_leaves_it_alone(tmp_path, monkeypatch):
    """A config run on a few nights only is a row of the pages of those nights, not of the others; a
    night that runs a config for the first time adds its row to the front page, leaves every archive
    page as it was, and reads the newest builds' runs alone. (A new case is another matter: every
    page's navigation names it.)"""
    path, out = tmp_path / "history.db", tmp_path / "site"
    read = counted_reads(monkeypatch)
    _history(path, 3)
    for nights in range(3, 6):
        _night_with_rows(path, nights, ["float16"])  # on the second page's builds alone
    for nights in range(6, 10):
        _add_night(path, nights)
    _publish(path, out)
    assert [_shows(out / f"matrix-{k}.html", "float16") for k in (1, 2, 3)] == [False, True, False]
    assert _shows(out / "index.html", "float16")
    for nights, dtype in [(10, "float64"), (11, "int8")]:
        before = site_files(out)
        _night_with_rows(path, nights, [dtype])
        read.clear()
        made = _publish(path, out)
        assert _shows(out / "index.html", dtype) and not _shows(out / "matrix-3.html", dtype)
        older = {"matrix-1.html", "matrix-2.html"}  # before the pages the night makes again
        assert not older & set(made), sorted(made)
        assert all(site_files(out)[name] == before[name] for name in older)
        assert len(read) == 1 and read[0] < (nights + 1) * NIGHT, read  # taken up, not from scratch
        _same_as_from_scratch(path, out, tmp_path / f"scratch-{nights}")


def _nights_with_a_hidden_error(path: Path, first: int, last: int) -> None:
    """Nights ``first`` to ``last`` - 1 of the synthetic history, where each night's first run records
    the same swallowed error in other words (an address that differs from run to run, which its key
    leaves out; a newer one sorts first)."""
    records = list(synthetic.records(last * NIGHT))[first * NIGHT :]
    for index, record in enumerate(records):
        if index % NIGHT == 0:
            record.hidden_errors.append(
                {"key": "TypeError:swallowed", "exc_type": "TypeError", "count": 1,
                 "message": f"cannot guard <object at 0x{0xFFFF - first * NIGHT - index:x}>"}
            )  # fmt: skip
    _save(path, records)


def test_a_finding_seen_again_in_other_words_keeps_its_text_and_the_pages_that_show_it(tmp_path, monkeypatch):
    """What a finding's key stands for is its first finding's text: a night that finds it again in
    other words changes no text, so the archive pages that show it are kept, and the night reads the
    newest builds alone."""
    path, out = tmp_path / "history.db", tmp_path / "site"
    read = counted_reads(monkeypatch)
    _nights_with_a_hidden_error(path, 0, 10)
    conn = sqlite3.connect(path)  # an index a user adds to browse the findings (Datasette's facets)
    conn.execute("CREATE INDEX hidden_by_key ON hidden_errors (key, message)")
    conn.close()
    _publish(path, out)
    for nights in range(10, 13):
        before = site_files(out)
        _nights_with_a_hidden_error(path, nights, nights + 1)
        read.clear()
        made = _publish(path, out)
        texts = store.key_texts(store.open_db(path, readonly=True))
        assert texts[("hidden_errors", "TypeError:swallowed")]["text"] == "cannot guard <object at 0xffff>"
        assert not {"matrix-1.html", "matrix-2.html"} & set(made), sorted(made)
        assert all(site_files(out)[name] == before[name] for name in ("matrix-1.html", "matrix-2.html"))
        assert len(read) == 1 and read[0] < (nights + 1) * NIGHT, read
        _same_as_from_scratch(path, out, tmp_path / f"scratch-{nights}")


class Read(list):
    """How many runs each render read from the DB (``builds``: of how many builds); a render from
    scratch reads them all."""

    def __init__(self) -> None:
        super().__init__()
        self.builds: list[int] = []

    def clear(self) -> None:
        super().clear()
        self.builds.clear()


def counted_reads(monkeypatch) -> Read:
    """The runs each render reads from now on (``Read``)."""
    counts = Read()
    original = store.report_runs

    def counted(db, build_ids=None):
        found = original(db, build_ids)
        counts.append(len(found))
        counts.builds.append(len({run["torch_build_id"] for run in found}))
        return found

    monkeypatch.setattr(store, "report_runs", counted)
    return counts


def test_an_archive_page_names_the_front_page_the_next_newer_page_and_every_older_one(tmp_path):
    path, out = tmp_path / "history.db", tmp_path / "site"
    _history(path, 13)  # four whole pages of three builds, and one build on the front page alone
    _publish(path, out)

    def listed(page: str) -> list[str]:
        text = (out / page).read_text()
        nav = text[text.index("Builds: ") : text.index("</span>", text.index("Builds: "))]
        return [part.split('"')[0] for part in nav.split('href="')[1:]]

    assert listed("index.html") == [f"matrix-{k}.html" for k in (4, 3, 2, 1)]
    assert listed("matrix-4.html") == ["index.html", "matrix-3.html", "matrix-2.html", "matrix-1.html"]
    assert listed("matrix-2.html") == ["index.html", "matrix-3.html", "matrix-1.html"]
    assert listed("matrix-1.html") == ["index.html", "matrix-2.html"]


def test_every_build_is_on_an_archive_page_or_the_front_one(tmp_path):
    path, out = tmp_path / "history.db", tmp_path / "site"
    _history(path, 8)
    _publish(path, out)
    versions = {b["version"] for b in store.builds(store.open_db(path, readonly=True))}
    shown = {}
    for page in [out / "index.html", *out.glob("matrix-*.html")]:
        text = page.read_text()
        start = text.index('<table class="matrix"')
        table = text[start : text.index("</thead>", start)]
        shown[page.name] = {v for v in versions if f">{v}</span>" in table}
    assert set().union(*shown.values()) == versions
    assert [len(shown[f"matrix-{k}.html"]) for k in (1, 2)] == [PER_PAGE, PER_PAGE]
    assert len(shown["index.html"]) == PER_PAGE and shown["matrix-1.html"] == {
        b["version"]
        for b in sorted(store.builds(store.open_db(path, readonly=True)), key=lambda b: b["nightly_date"])[:3]
    }


def _oldest_run(conn: sqlite3.Connection) -> int:
    return conn.execute(
        "SELECT r.id FROM runs r JOIN torch_builds b ON b.id = r.torch_build_id "
        "WHERE r.\"case\" = 'append_last' AND r.fullgraph = 1 ORDER BY b.nightly_date, r.id LIMIT 1"
    ).fetchone()[0]


# What an archive page shows of a run or a build, each changed in the DB behind diag's back
CHANGES = {
    "status": "UPDATE runs SET status = 'crash' WHERE id = {run}",
    "error": "UPDATE runs SET error_type = 'TypeError', error_message = 'guards' WHERE id = {run}",
    "graph breaks": "UPDATE runs SET graph_break_count = 41 WHERE id = {run}",
    "recompiles": "UPDATE runs SET recompile_count = 42 WHERE id = {run}",
    "hidden errors": "UPDATE runs SET hidden_error_count = 43 WHERE id = {run}",
    "python": "UPDATE runs SET python = '3.10.4' WHERE id = {run}",
    "transformers": "UPDATE runs SET transformers_version = '9.9.9' WHERE id = {run}",
    "a hidden error": "INSERT INTO hidden_errors (run_id, key, source, exc_type, message) "
    "VALUES ({run}, 'TypeError:hidden', 'log', 'TypeError', 'swallowed')",
    "a build's commit": "UPDATE torch_builds SET git_version = 'feedface' "
    "WHERE id = (SELECT torch_build_id FROM runs WHERE id = {run})",
    "a run deleted": "; ".join(f'DELETE FROM "{table}" WHERE run_id = {{run}}' for table in store.CHILD_TABLES)
    + "; DELETE FROM runs WHERE id = {run}",
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_what_an_archive_page_shows_changed_in_the_db_makes_it_again(tmp_path, change):
    path, out = tmp_path / "history.db", tmp_path / "site"
    _history(path, 7)
    _publish(path, out)
    conn = sqlite3.connect(path)
    with conn:
        conn.executescript(CHANGES[change].format(run=_oldest_run(conn)))
    conn.close()
    made = _publish(path, out)
    assert "matrix-1.html" in made
    _same_as_from_scratch(path, out, tmp_path / "scratch")


def test_the_code_digest_covers_every_module_the_report_runs():
    """A page is kept while its inputs and the code that renders it are unchanged: every module of
    diag that rendering imports (the store's queries, page addresses, the probe's vocabulary) is
    in the digest, not only the report's own."""
    import subprocess

    listed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, diag.report; print('\\n'.join(m.__file__ for n, m in sys.modules.items() "
            "if n.startswith('diag') and getattr(m, '__file__', None)))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    hashed = {path.resolve() for path in inputs.source_files()}
    assert len(listed) > 30 and {Path(p).resolve() for p in listed} <= hashed
    assert {p.name for p in hashed} >= {"run.html.j2", "index.html.j2"}
