"""Where the CPU of `diag report` goes, step by step: a render from scratch and one a night later, in
one process (``--processes 1``), on a synthetic history of ``--runs`` runs.

Each step of the render (reading the runs, the finding keys, the model, the charts, report.json, the
matrix pages, ...) is timed by wrapping the function that does it, in CPU seconds of this process;
``other`` is what no wrapped step covers (templates of the remaining pages, writing the site). The
imports a command pays for are timed apart, in a fresh interpreter. Each trial renders into a fresh
folder from a fresh copy of the history; the table gives the median (range) of ``--repeats`` trials.

    python bench/report_steps.py                 # 50,000 runs, three trials
"""

from __future__ import annotations

import argparse
import collections
import functools
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import synthetic  # after sys.path names bench/
from common import compiled  # as above

from diag import report, store  # after sys.path names the repository
from diag.report import breaks_page, charts, history, matrix_pages, variants_page  # as above

# (label, module, attribute): each step where the render looks it up
STEPS: list[tuple[str, Any, str]] = [
    ("read the runs", store, "report_runs"),
    ("read the finding keys", store, "finding_keys"),
    ("read the key texts", store, "key_texts"),
    ("the model", history, "build_matrix"),
    ("the detailed runs", report, "detailed_runs"),
    ("the variants", variants_page, "context"),
    ("the graph-break contexts", breaks_page, "contexts"),
    ("the pages' marks", store, "page_marks"),
    ("the matrix pages", matrix_pages, "pages"),
    ("the charts", charts, "case_charts"),
    ("report.json", report, "report_json"),
    ("the run pages", report, "_run_pages"),
    ("writing the site", report.Site, "publish"),
]
KINDS = ("from scratch", "one night later")
IMPORTS = (  # what `diag report` imports before it reads the DB, in CPU seconds
    "import time; t = time.process_time(); from diag.cli import cli; cli.get_command(None, 'report'); "
    "import diag.report; print(time.process_time() - t)"
)


def _timed(spent: collections.Counter, label: str, function: Callable) -> Callable:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            result = function(*args, **kwargs)
            if isinstance(result, types.GeneratorType):  # the run pages: made as they are taken
                result = list(result)
            return result
        finally:
            spent[label] += time.process_time() - start

    return wrapper


def render(db_path: Path, out: Path) -> dict[str, float]:
    """One render of ``db_path`` into ``out`` in this process, with each step's CPU seconds."""
    spent: collections.Counter = collections.Counter()
    originals = [(module, name, getattr(module, name)) for _, module, name in STEPS]
    for (label, module, name), (_, _, function) in zip(STEPS, originals):
        setattr(module, name, _timed(spent, label, function))
    try:
        start = time.process_time()
        db = store.open_db(db_path, readonly=True)
        site = report.Site(out, db_path)
        site.publish(report.render(db, out, db_name=db_path.stem, processes=1, site=site))
        db.conn.close()
        total = time.process_time() - start
    finally:
        for module, name, function in originals:
            setattr(module, name, function)
    return {**spent, "other": total - sum(spent.values()), "total": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    compiled()  # the imports timed apart read diag's bytecode, as an installed diag does
    found: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    imports = []
    with tempfile.TemporaryDirectory(prefix="diag-report-steps-") as tmp:
        work = Path(tmp)
        seed = work / "history.db"
        made = synthetic.write_history(seed, args.runs)
        for trial in range(args.repeats):
            copy, out = work / f"trial{trial}.db", work / f"site{trial}"
            copy.write_bytes(seed.read_bytes())
            found[KINDS[0]].append(render(copy, out))
            synthetic.add_nightly(copy, made)
            found[KINDS[1]].append(render(copy, out))
            done = subprocess.run([sys.executable, "-c", IMPORTS], capture_output=True, text=True, check=True)
            imports.append(float(done.stdout))
    print(f"{made:,} synthetic runs, one process, {args.repeats} trials: CPU seconds, median (range)")
    print("| step | " + " | ".join(KINDS) + " |")
    print("|---|" + "---|" * len(KINDS))
    labels = [label for label, _, _ in STEPS] + ["other", "total"]
    for label in labels:
        cells = []
        for kind in KINDS:
            values = [trial.get(label, 0.0) for trial in found[kind]]
            cells.append(f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})")
        print(f"| {label} | " + " | ".join(cells) + " |")
    spread = f"{statistics.median(imports):.2f} ({min(imports):.2f}-{max(imports):.2f})"
    print(f"| imports of `diag report`, apart | {spread} | {spread} |")


if __name__ == "__main__":
    main()
