"""The matrix table (a row per case x config, a column per build), written in Python, not in a
template: the big matrix has tens of thousands of cells and a Jinja call per cell was most of a render."""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from markupsafe import Markup, escape

from diag.report.model import Cell, Matrix, RowKey, error_line, row_label
from diag.store.typed import StoredRun, TorchBuildRow
from diag.text import safe


def _text(value: Any) -> str:
    return str(escape(safe(str(value))))


def build_label(build: TorchBuildRow) -> str:
    """A build's version with its git commit, nightly date and variant on hover (macros' build_label)."""
    hover = f"git {build.get('git_version') or 'unknown'}"
    if build.get("nightly_date"):
        hover += f", nightly {build['nightly_date']}"
    hover += f", {build['variant']}"
    return f'<span class="build" title="{_text(hover)}">{_text(build["version"])}</span>'


@functools.lru_cache(maxsize=4096)
def _word(value: str) -> str:
    """A status (a word from a small vocabulary, stored data all the same), escaped once per render."""
    return str(escape(safe(value)))


def _link(run: StoredRun, inner: str, root: str, paged: dict[int, str]) -> str:
    href = paged.get(run["id"])
    if href is not None:
        return f'<a href="{root}{_text(href)}">{inner}</a>'
    return f'<span title="run #{run["id"]}: diag show {run["id"]}">{inner}</span>'


def cell_html(cell: Optional[Cell], root: str, paged: dict[int, str]) -> Markup:
    """One matrix cell: its deciding (worst) run's status (linked to its page when it has one), the ▲
    of a change, with several runs how many worked and a dot per run, and where its runs differ in
    Python or transformers, each side's status. Written here, not as a template macro: the big
    matrix has tens of thousands of cells."""
    return Markup(_cell(cell, root, paged))


_EMPTY = '<td class="cell muted">·</td>'


def _cell(cell: Optional[Cell], root: str, paged: dict[int, str]) -> str:
    """``cell_html`` as plain text, for the table that joins tens of thousands of them."""
    if cell is None:
        return _EMPTY
    run = cell.run
    status = _word(run["status"])
    badge = _link(run, f'<span class="badge s-{status}">{status}</span>', root, paged)
    if cell.changed:
        head = (
            f'<td class="cell changed" title="status changed at this build">{badge}<span class="mark"> &#9650;</span>'
        )
    else:
        head = f'<td class="cell">{badge}'
    breaks, recompiles, hidden = run.get("graph_break_count"), run.get("recompile_count"), run.get("hidden_error_count")
    counts = (
        f'<span class="counts">{"-" if breaks is None else breaks}b · {"-" if recompiles is None else recompiles}r · '
        f"{'-' if hidden is None else hidden}h</span></td>"
    )
    if len(cell.runs) == 1:  # most cells
        return head + counts
    parts = [head]
    worst = _word(cell.worst)
    parts.append(
        f'<span class="counts">{cell.tally}{f" · worst {worst}" if cell.mixed else ""}</span><span class="counts">'
    )
    for each in cell.runs:
        each_status = _word(each["status"])
        parts.append(
            _link(
                each, f'<span class="dot s-{each_status}" title="run #{each["id"]}: {each_status}"></span>', root, paged
            )
        )
    parts.append("</span>")
    for label, side in cell.split:
        parts.append(
            f'<span class="split">{escape(safe(label))}: {_link(side, _word(side["status"]), root, paged)}</span>'
        )
    parts.append(counts)
    return "".join(parts)


def hidden_text(texts: Optional[dict[tuple[str, str], dict[str, Any]]], key: str) -> Optional[str]:
    """What a hidden-error key stands for (``store.key_texts``), where it is known."""
    return ((texts or {}).get(("hidden_errors", key)) or {}).get("text")


def row_filter(
    matrix: Matrix,
    row: RowKey,
    builds: list[TorchBuildRow],
    hidden: Optional[dict[int, list[str]]] = None,
    texts: Optional[dict[tuple[str, str], dict[str, Any]]] = None,
) -> str:
    """What the matrix filter matches a row on: case and config, and on ``builds`` every run's status
    (a crash among repeats too), its error (type and first line) and the hidden errors it recorded
    (``hidden``: per run id, its hidden-error keys)."""
    words: set[str] = set()
    column = matrix.column(row)
    hidden = hidden or {}
    for build in builds:
        cell = column.get(build["id"])
        if cell is None:
            continue
        for run in cell.runs:
            words.add(run["status"] or "")
            if run.get("error_type"):
                words.add(error_line(run) or "")
            for key in hidden.get(run["id"], ()):
                words.update((key, hidden_text(texts, key) or ""))
    return " ".join([row.case, row_label(row), *sorted(w for w in words if w)])


def table_inputs(
    rows: list[RowKey],
    builds: list[TorchBuildRow],
    history: str,
    owner: dict[int, int],
    paged: dict[int, str],
    hidden: dict[int, list[str]],
    texts: Optional[dict[tuple[str, str], dict[str, Any]]] = None,
) -> list[Any]:
    """What ``matrix_table`` shows of ``builds`` (a chunk of ``matrix.builds``) in ``rows``, named
    without reading a cell, which says whether the table changed without making it (inputs.py).
    Kept beside the code that reads them: a value the table comes to show must be named here as well.

    ``history``: ``inputs.build_history`` up to the chunk's newest build: every build up to there
    with its stamp, which changes with any of its runs and what they found (the cells, their runs'
    errors and counts, the Pythons and transformers of a build) and, through the builds before the
    chunk, with which of its cells changed status. Beside it, what the rest of the history decides:
    which of the chunk's runs have a page (``owner``: the build of each run of ``paged`` and
    ``hidden``), and the text of each hidden error of its runs (a key's text may come from another
    build's finding)."""
    ids = {build["id"] for build in builds}
    mine = sorted(run_id for run_id in paged.keys() | hidden.keys() if owner.get(run_id) in ids)
    return [
        history,
        [tuple(row) for row in rows],
        [run_id for run_id in mine if run_id in paged],
        [[run_id, key, hidden_text(texts, key)] for run_id in mine for key in hidden.get(run_id, ())],
    ]


def matrix_table(
    matrix: Matrix,
    builds: list[TorchBuildRow],
    root: str,
    paged: dict[int, str],
    case_href: Callable[[str], str],
    hidden: Optional[dict[int, list[str]]] = None,
    texts: Optional[dict[tuple[str, str], dict[str, Any]]] = None,
    rows: Optional[list[RowKey]] = None,
) -> Markup:
    """The matrix of ``builds`` (newest first as given): a header per build naming the Pythons and
    transformers its runs used, a row per case x config (of ``rows``; by default every row of the
    matrix) with what the filter matches it on."""
    matrix.held(build["id"] for build in builds)
    head = ['<div class="frame"><table class="matrix" id="matrix">']
    head.append('<thead><tr><th class="rowhead">case · config</th>')
    for build in builds:
        head.append(f"<th>{build_label(build)}")
        for name, found in (("Python", matrix.pythons), ("transformers", matrix.transformers)):
            if found.get(build["id"]):
                head.append(
                    f'<span class="counts" title="{name} in this build&#39;s runs">'
                    f"{name} {_text(', '.join(found[build['id']]))}</span>"
                )
        head.append("</th>")
    out = ["".join(head) + "</tr></thead>", "<tbody>"]
    ids = [build["id"] for build in builds]
    for row in matrix.rows if rows is None else rows:
        case, column = _text(row.case), matrix.column(row)
        out.append(
            f'<tr data-filter="{_text(row_filter(matrix, row, builds, hidden, texts))}">\n'
            f'<th class="rowhead"><a href="{root}{_text(case_href(row.case))}">{case}</a>'
            f'<span class="counts">{_text(row_label(row))}</span></th>\n'
            + "".join([_cell(column.get(build_id), root, paged) for build_id in ids])
            + "\n</tr>"
        )
    out.append("</tbody>\n</table></div>")
    return Markup("\n".join(out))
