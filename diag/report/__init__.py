"""The static HTML report: ``render`` returns {relative path: content}; ``publish`` writes it.

Layout: ``index.html`` (the answer per case and fullgraph mode, then the matrix over the
newest builds, newest first, and the newest transitions), ``matrix-K.html`` (the K-th 25 builds
counted from the oldest), ``transitions.html`` (every transition and key change, with filters),
``cases/<case>.html`` (trend charts), ``runs/<build id>-<case>.html`` (the details of that case's
runs on that build, one section each: ``pages.run_href``), ``report.json`` (a machine-readable
index), ``datasette.json`` (Datasette metadata for the DB) and ``404.html`` with
``run-pages.json`` (an old ``runs/<id>.html`` address sent to its section). ``publish``
(publish.py) writes it.

Runs are detailed for every run of the newest ``detail_builds`` builds and of both sides of
every transition and key change; older cells name their run ids for ``diag show`` and
report.json. A year of nightlies stays a site of a few hundred pages.

Rendering is a function of the DB alone (no clock): unchanged data renders byte-identical
pages, and ``publish`` leaves files whose content did not change untouched.
"""

from __future__ import annotations

import functools
import gc
import json
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, cast

import jinja2

from diag import figure, pages, store
from diag.pages import case_href
from diag.report import breaks_page, charts, forked, history, inputs, matrix_html, matrix_pages, run_page, variants_page
from diag.report import resume as resume_at
from diag.report.architectures import hf_architectures
from diag.report.context import BUILDS_PER_PAGE, DETAIL_BUILDS, Options, Render
from diag.report.index_json import report_json
from diag.report.model import Matrix, Settled
from diag.report.publish import MANIFEST, ReportError, Site, publish
from diag.report.run_page import ci_link
from diag.report.templating import environment
from diag.run import trace
from diag.store.typed import StoredRun, TorchBuildRow
from diag.text import config_text
from diag.verdicts import changes as changes_of
from diag.verdicts import dated, gate, regress, why

__all__ = ["MANIFEST", "ReportError", "Site", "ci_link", "publish", "render", "report_json"]

STRIP_BUILDS = 30


def detailed_runs(matrix: Matrix, detail_builds: int) -> dict[int, str]:
    """The runs whose details are shown, each with the address of its section (``pages.run_href``):
    every run of a cell on the newest builds or on either side of a transition or key change."""
    newest = {b["id"] for b in matrix.builds[-detail_builds:]} if detail_builds > 0 else set()
    matrix.held(newest)
    cells = [cell for _, build_id, cell in matrix.cells() if build_id in newest]
    return {**{run["id"]: pages.run_href(run) for cell in cells for run in cell.runs}, **matrix.sides}


def _data_stamp(newest: Optional[tuple[int, Optional[str]]]) -> str:
    """What the site shows, in words that change only with the data: the newest run (its id and start)."""
    if not newest:
        return "no runs yet"
    return f"runs up to #{newest[0]} ({newest[1] or 'time unknown'})"


def render(
    db,
    out_dir: Path,
    builds_per_page: int = BUILDS_PER_PAGE,
    detail_builds: int = DETAIL_BUILDS,
    db_name: Optional[str] = None,
    processes: Optional[int] = None,
    site: Optional[Site] = None,
    carry_artifacts: bool = False,
) -> dict[str, str]:
    """Every page of the site for ``db``; ``out_dir`` is where the site was made before (what it kept);
    ``db_name`` is the name Datasette will give the DB (its file's stem). Given the ``site`` the
    pages will be published in, and with ``processes`` 2 (by default, where the machine has two
    cores), a forked helper renders the run pages meanwhile and writes them there itself, once the
    site has claimed them (forked.py): they come back ``Written``. Otherwise, or with ``processes``
    1, everything is rendered in this process. The site is the same either way. With
    ``carry_artifacts``, the site holds a copy of each detailed run's directory and links it; else a
    run page says its artifacts stayed where the run was recorded (a link out of the site breaks once
    it is published).

    Python's cycle collector is paused meanwhile: the history is read into a few hundred thousand
    objects that live until the end, and every collection walked them all again (a fifth of a
    render); what a render makes and drops has no cycles of any size.

    Where the site holds the matrix's state as a render left it some builds back (resume.py), only
    the runs of the builds after it are read; a page that shows a cell of an earlier build all the
    same makes the render start again from scratch (``Settled``). The site is the same either way."""
    collecting = gc.isenabled()
    gc.disable()
    # one read transaction: every query sees the DB as it stood at the first (a run stored meanwhile
    # by a `diag run` is in the next render, and the stamps read are those of the runs read)
    reading = not db.conn.in_transaction
    if reading:
        db.conn.execute("BEGIN")
    options = Options(out_dir, builds_per_page, detail_builds, db_name, processes, site, carry_artifacts)
    try:
        try:
            return _render(db, options, resume=True)
        except Settled:
            return _render(db, options, resume=False)
    finally:
        if reading:
            db.conn.rollback()
        if collecting:
            gc.enable()


def _run_pages(
    source, template: jinja2.Template, listed: list[tuple[str, list[int]]], context: dict[str, Any]
) -> Iterator[tuple[str, str]]:
    """(path, page) of each page of runs in ``listed`` (its path and its runs' ids), read from
    ``source`` (a DB). A page whose runs are all gone meanwhile is not made."""
    for path, run_ids in listed:
        runs = []
        for run in store.full_runs(source, run_ids):
            for gb in run["graph_breaks"]:
                match = store.DOC_URL.search(gb.get("reason") or "")
                cast(dict[str, Any], gb)["doc_url"] = match.group(0) if match else None  # the page's own field
            runs.append(
                {
                    "run": run,
                    "config_label": config_text(run),
                    "timing_stats": [run_page.in_ms(t) for t in run["timings"]],
                    "figures": figure.of_run(run),
                    "artifacts": run_page.listing(run, bool(context.get("carry_artifacts"))),
                    "ci": run_page.ci_link(run),
                    "profile": why.profile_of(run),
                    "frame_count": trace.frame_count(run),
                    "profile_groups": why.groups_of_run(run),
                    "kernel_text": why.kernel_text(why.profile_of(run)["kernels"]) if why.profile_of(run) else "",
                    "refusals": why.refusal_lines(why.profile_of(run).get("refused") or {}),
                }
            )
        if runs:
            yield path, template.render(root="../", first=runs[0]["run"], runs=runs, **context)


def _render(db, options: Options, resume: bool) -> dict[str, str]:
    env = environment()
    template = env.get_template("run.html.j2")
    # the run pages' renderer and writer, forked before the history is read: it shares only the
    # imports with this process, so the model this process builds and walks is never copied into it
    path, site, out_dir = store.path_of(db), options.site, options.out_dir
    made = inputs.Pages(out_dir, (out_dir / MANIFEST).exists())
    helper = forked.Helper.when(
        site is not None
        and (options.processes or forked.cores()) > 1
        and made.fresh()
        and forked.can_fork()
        and path.name != "",
        lambda task: (
            (name, bool(site and site.write(name, page)))
            for name, page in _run_pages(store.open_db(path, readonly=True), template, task[0], task[1])
        ),
    )

    def hand_off(listed: list[tuple[str, list[int]]], context: dict[str, Any]) -> None:
        """Give the helper the pages of runs, where they hold enough runs to pay for it, once the
        site has claimed them (a folder that is not diag's is refused here, before the helper writes)."""
        if (
            site is not None
            and isinstance(helper, forked.Helper)
            and forked.worth_forking(sum(len(run_ids) for _, run_ids in listed))
        ):
            site.claim(path for path, _ in listed)
            helper.send((listed, context))

    this = Render(db, options, env, made, resume and not made.fresh())
    with helper:
        files, rendered = _pages(this, hand_off)
        written = helper.result()
    if written is None:
        files.update(_run_pages(db, template, rendered, this.quiet))
    else:
        files.update((name, inputs.Written() if new else inputs.Kept()) for name, new in written.items())
    return files


def _pages(
    this: Render, hand_off: Callable[[list[tuple[str, list[int]]], dict[str, Any]], None]
) -> tuple[dict[str, str], list[tuple[str, list[int]]]]:
    """Every page but the pages of runs, with those to be rendered (each one's path and its runs'
    ids); those are given to ``hand_off`` as soon as they are known, with what they share. Where
    ``this.resume``, the matrix is taken up from the state kept beside the site, where it can be."""
    db, options, made = this.db, this.options, this.made
    line = history.ordered(store.builds(db), store.run_builds(db))
    marks = inputs.build_marks(line, store.build_stamps(db))
    stamped = inputs.build_history(line, marks)
    keep = resume_at.keep_at(line, options.detail_builds, options.builds_per_page)
    start = resume_at.kept(options.out_dir, this.resume and bool(made.before), stamped, STRIP_BUILDS, keep)
    live = [build["id"] for build in line[len(start["folded"]) :]] if start else None
    runs, keys = store.report_runs(db, live), store.finding_keys_of_builds(db, live)
    this.changes, this.changes_window = night_changes(db, runs, line[keep:], live), len(line) - keep
    matrix = history.build_matrix(store.builds(db), runs, keys, STRIP_BUILDS, start, keep)
    paged = detailed_runs(matrix, options.detail_builds)
    this.memo = inputs.Memo(options.out_dir, bool(made.before), marks)
    breaks, swallowed = (
        breaks_page.contexts(db, matrix, this.memo, k) for k in (breaks_page.BREAKS, breaks_page.HIDDEN)
    )
    shown = variants_page.context(db, matrix.builds, runs)
    texts, hidden = store.key_texts(db), store.hidden_keys(db)
    this.env.globals["matrix_table"] = functools.partial(
        matrix_html.matrix_table, case_href=case_href, hidden=hidden, texts=texts
    )
    cases = sorted({row.case for row in matrix.rows})
    this.common = _shared(this, cases, paged, texts, has_variants=shown is not None, has_breaks=bool(breaks))
    this.nav = [this.common[name] for name in ("case_links", "has_architectures", "has_variants", "has_breaks")]
    this.nav.append(options.carry_artifacts)  # a run page links its artifacts or says they stayed
    run_marks = store.page_marks(db, paged)
    files, rendered = _stale_run_pages(this, paged, run_marks)
    if options.carry_artifacts:
        for mark in run_marks.values():
            files.update(run_page.carried(mark[0], mark[-1]))
    hand_off(rendered, this.quiet)
    owner = store.run_owners(db, paged.keys() | hidden.keys())

    def tables(end: int, chunk: list[TorchBuildRow], rows: list[Any]) -> list[Any]:
        return matrix_html.table_inputs(rows, chunk, stamped[end], owner, paged, hidden, texts)

    files.update(matrix_pages.pages(this, matrix, _front(this, matrix, swallowed), tables))
    files.update(_summary_pages(this, matrix, keys, breaks, shown))
    files.update(key_pages(this, swallowed, breaks_page.HIDDEN))
    files.update(_case_pages(this, matrix, runs, cases))
    files["datasette.json"] = json.dumps(store.datasette_metadata(db, options.db_name), indent=1)
    # an old address of a run's page (runs/<id>.html, as alerts named it) is sent to its section
    files[RUN_INDEX] = json.dumps({str(run_id): paged[run_id] for run_id in sorted(paged)}, separators=(",", ":"))
    files["404.html"] = this.page("404.html.j2")
    files[inputs.INPUTS], files[inputs.MEMO] = made.written(), this.memo.written()
    kept = resume_at.written(matrix.state, keep, stamped, STRIP_BUILDS)
    if kept is not None:
        files[resume_at.FOLD] = kept
    return files, rendered


def _front(this: Render, matrix: Matrix, swallowed: list[dict[str, Any]]) -> dict[str, Any]:
    """What the front page is given beside what every page is: the counts of the history, and per
    case the pages of the hidden-error keys its runs recorded on any build in view."""
    by_case: dict[str, list[dict[str, Any]]] = {}
    for page in swallowed:
        for case in page["cases"]:
            by_case.setdefault(case, []).append(page)
    return {
        **this.common,
        "run_count": store.run_count(this.db),
        "folded_count": store.folded_total(this.db),
        "build_count": len(matrix.builds),
        "row_count": len(matrix.rows),
        "hidden_pages": by_case,
        "causes": night_causes(this.db),
        "changes": [change.as_dict() for change in this.changes[:FRONT_CHANGES]],
        "changes_total": len(this.changes),
        "changes_window": this.changes_window,
        "twin_nights": dated.TWIN_NIGHTS,
    }


def night_changes(db: Any, runs: list[StoredRun], window: list[TorchBuildRow], live: Optional[list[int]]) -> list[Any]:
    """The change points over ``window`` (the builds every render holds the runs of, taken up from
    the night before or not: ``diag changes`` searches the whole history), the runner told apart by
    the release run on the most nights where there is one: what the front page lists and the case
    pages' charts mark. Newest first. Only that release's runs are read again, where the render did
    not read them (``live``: the builds it read; None: all)."""
    builds = {b["id"]: b for b in store.builds(db)}
    twin = dated.guessed_twin(builds, store.nights_per_build(db))
    ids = {b["id"] for b in window}
    kept = [r for r in runs if r["torch_build_id"] in ids]
    if twin is not None and twin["id"] not in ids:
        held = live is None or twin["id"] in live
        kept += [r for r in runs if r["torch_build_id"] == twin["id"]] if held else store.report_runs(db, [twin["id"]])
    return dated.of_runs(kept, builds, list(changes_of.METRICS), twin, named=False).changes


FRONT_CHANGES = 12  # the newest change points the front page lists


def night_causes(db: Any) -> list[dict[str, Any]]:
    """What ``diag check`` finds on each variant's newest build, by cause (its default baseline and
    thresholds, no allow-list): the front page lists them above the rows."""
    try:
        outcome = gate.check(db, None, regress.Thresholds(), set())
    except store.StoreError:
        return []
    return [{**cause.as_dict(), "hit": cause.hit(), "headline": cause.headline} for cause in outcome.causes]


def key_pages(this: Render, entries: list[dict[str, Any]], kind: breaks_page.Kind) -> dict[str, str]:
    """A page per key of ``entries`` (breaks_page.contexts of ``kind``)."""
    quiet = this.quiet
    return {
        entry["href"]: this.page("break.html.j2", root="../", b=entry, noun=kind.noun, **quiet) for entry in entries
    }


def _shared(this: Render, cases, paged, texts, *, has_variants: bool, has_breaks: bool) -> dict[str, Any]:
    """What every page is given: the navigation, the run pages' addresses, the keys' texts."""
    return {
        "case_links": [{"name": c, "href": case_href(c)} for c in cases if not c.startswith(HF_PREFIX)],
        "has_architectures": any(c.startswith(HF_PREFIX) for c in cases),
        "paged": paged,
        "data_stamp": _data_stamp(store.newest_run(this.db)),
        "key_texts": texts,
        "detail_builds": this.options.detail_builds,
        "has_variants": has_variants,
        "has_breaks": has_breaks,
        "carry_artifacts": this.options.carry_artifacts,
    }


def _stale_run_pages(this: Render, paged: dict[int, str], run_marks: dict[int, tuple[Any, ...]]):
    """The pages of runs whose inputs changed since the site was made (each path with its runs' ids),
    and the others, kept as they are; ``run_marks``: ``store.page_marks`` of the runs in ``paged``."""
    files: dict[str, Any] = {}
    rendered = []
    for path, marks in _grouped(paged, run_marks).items():
        folders = [bool(mark[-1]) and Path(mark[-1]).is_dir() for mark in marks]
        if this.made.stale(path, inputs.digest(inputs.sources(), this.nav, marks, folders)):
            rendered.append((path, [mark[0] for mark in marks]))
        else:
            files[path] = inputs.Kept()
    return files, rendered


def _summary_pages(this: Render, matrix: Matrix, keys, breaks, shown) -> dict[str, str]:
    """The transitions, architectures, graph-break keys and variants pages, and report.json."""
    common = this.common
    backends = sorted({r.backend for r in matrix.rows})
    files = {
        "transitions.html": this.page(
            "transitions.html.j2",
            root="",
            matrix=matrix,
            transitions=matrix.transitions,
            key_changes=matrix.key_changes,
            backends=backends,
            **common,
        ),
        "report.json": report_json(matrix),
    }
    architectures = hf_architectures(matrix, keys, HF_PREFIX)
    if architectures:
        files["architectures.html"] = this.page(
            "architectures.html.j2", root="", matrix=matrix, architectures=architectures, **common
        )
    if breaks:
        files["breaks.html"] = this.page("breaks.html.j2", root="", breaks=breaks, **common)
        files.update(key_pages(this, breaks, breaks_page.BREAKS))
    if shown is not None:
        files["variants.html"] = this.page("variants.html.j2", root="", v=shown, **common)
    return files


def _case_pages(this: Render, matrix: Matrix, runs, cases: list[str]) -> dict[str, str]:
    """One page of trend charts per case, with the sweeps of its runs on the newest build."""
    newest = matrix.builds[-1]["id"] if matrix.builds else None
    on_newest: dict[Optional[str], list[StoredRun]] = {}
    for run in runs:
        if run["torch_build_id"] == newest:
            on_newest.setdefault(run["case"], []).append(run)
    quiet, memo = this.quiet, this.memo
    assert memo is not None  # made with the matrix (_pages)
    return {
        case_href(case): this.page(
            "case.html.j2",
            root="../",
            case=case,
            charts=charts.case_charts(matrix, case, memo, charts.change_marks(this.changes, case)),
            sweeps=charts.sweep_charts(on_newest.get(case, [])),
            newest=matrix.builds[-1] if matrix.builds else None,
            untrusted=charts.untrusted(on_newest.get(case, [])),
            detail=charts.DETAIL_BUILDS,
            max_lines=charts.MAX_LINES,
            **quiet,
        )
        for case in cases
    }


def _grouped(paged: dict[int, str], marks: dict[int, tuple[Any, ...]]) -> dict[str, list[tuple[Any, ...]]]:
    """Per page of runs, the marks (``store.page_marks``) of its runs, oldest first."""
    found: dict[str, list[tuple[Any, ...]]] = {}
    for run_id in sorted(marks):
        found.setdefault(paged[run_id].partition("#")[0], []).append(marks[run_id])
    return dict(sorted(found.items()))


RUN_INDEX = "run-pages.json"  # per run id with details, its section's address: what 404.html reads
HF_PREFIX = "hf:"  # the architecture cases (diag/run/catalog.py): their own page, not one link each in the nav
