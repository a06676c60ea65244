"""The matrix's pages: the front page (``index.html``) and the archive pages (``matrix-K.html``)."""

from __future__ import annotations

import functools
from typing import Any, Callable

from diag.report import charts, inputs
from diag.report.context import Render
from diag.report.model import Matrix, RowKey, archive
from diag.store.typed import TorchBuildRow

FRONT_LISTED = 15  # transitions and key changes on the front page; transitions.html lists them all
ROWS = "rows"  # what the memo keeps of a build for the archive pages (``build_rows``)


def build_rows(matrix: Matrix) -> Callable[[int], str]:
    """The rows with a cell on a build, by their marks (``charts.row_mark``), in one string (which
    the memo's JSON reads as fast as one word, not a hundred): a function of the build's runs alone,
    kept from one night to the next (``inputs.Memo``). Every build's are found in one pass over the
    matrix's cells, where the memo first lacks one."""
    found: dict[int, list[str]] = {}

    def of(build_id: int) -> str:
        matrix.held([build_id])
        if not found:
            for row, column in matrix.by_row.items():
                mark = charts.row_mark(row)
                for each in column:
                    found.setdefault(each, []).append(mark)
        return " ".join(sorted(found.get(build_id, ())))

    return of


def page_rows(
    matrix: Matrix, chunk: list[TorchBuildRow], memo: inputs.Memo, rows_of: Callable[[int], str]
) -> list[RowKey]:
    """The rows an archive page of ``chunk`` shows: those with a run on one of its builds
    (``rows_of``: ``build_rows``), in the matrix's order. A row first run later is not a line of it,
    so the page stays as it was."""
    marks: set[str] = set()
    for build in chunk:
        marks.update(memo.of(ROWS, build, functools.partial(rows_of, build["id"])).split())
    return [row for row in matrix.rows if charts.row_mark(row) in marks]


def pages(
    this: Render,
    matrix: Matrix,
    front: dict[str, Any],
    tables: Callable[[int, list[TorchBuildRow], list[RowKey]], list[Any]],
) -> dict[str, str]:
    """``index.html`` shows the newest ``this.options.builds_per_page`` builds; ``matrix-K.html`` the
    K-th whole chunk of builds counted from the oldest (``model.archive``). A chunk's page keeps its builds
    however many nights are added, so its address keeps its meaning and its content changes only
    with its own runs (a run page made or dropped as the newest builds move on, say) and once with
    its navigation (which names the front page, the next newer page and every older one: a page
    joining the archive changes only the one before it, whose builds the render holds); one whose
    inputs are those it was published from is Kept. Every build is on an archive page or on the
    front one, or both. The front page shows every row, an archive page those with a run on its
    builds (``page_rows``). ``front``: what the front page carries (with the counts of runs, builds
    and rows); an archive page carries ``this.quiet`` (no stamp of the newest data); ``tables(end,
    chunk, rows)``: what the table of a chunk ending at ``matrix.builds[end]`` is made from
    (``matrix_html.table_inputs``)."""
    size, quiet, memo = max(1, this.options.builds_per_page), this.quiet, this.memo
    assert memo is not None  # made with the matrix
    chunks = archive(matrix.builds, size)
    names = [f"matrix-{k}.html" for k in range(1, len(chunks) + 1)]
    ends = {name: (k + 1) * size - 1 for k, name in enumerate(names)}
    labels = [f"{chunk[-1]['version']} … {chunk[0]['version']}" for chunk in chunks]
    files: dict[str, str] = {}
    rows_of = build_rows(matrix)
    for k, (name, chunk) in enumerate([("index.html", matrix.builds[-size:]), *zip(names, chunks)]):
        on_front = name == "index.html"
        # the front page lists every archive page; the K-th lists the front page, the (K+1)-th and the
        # K-th to the first, which stay what they are as later pages join the archive
        shown = len(names) if on_front else min(k + 1, len(names))
        listed = [("index.html", f"newest {size}")] + [(names[i], labels[i]) for i in reversed(range(shown))]
        pagination = [{"href": href, "label": label, "current": href == name} for href, label in listed]
        rows = None if on_front else page_rows(matrix, chunk, memo, rows_of)
        if rows is not None and not this.made.stale(
            name,
            inputs.digest(
                inputs.sources(), this.nav, pagination, quiet["detail_builds"], tables(ends[name], chunk, rows)
            ),
        ):
            files[name] = inputs.Kept()
            continue
        files[name] = this.page(
            "index.html.j2",
            root="",
            matrix=matrix,
            page_builds=list(reversed(chunk)),
            page_rows=rows,
            pagination=pagination,
            front=on_front,
            transitions=matrix.transitions[:FRONT_LISTED],
            key_changes=matrix.key_changes[:FRONT_LISTED],
            **(front if on_front else quiet),
        )
    return files
