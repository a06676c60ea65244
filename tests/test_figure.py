"""A judged figure is read in one place: diag/figure.py is the one module outside the store and the
step that measures (diag/run/measured.py) that reads the columns holding a figure's trust, so that
every surface (the run line, show, runs, compare, check, the pages, --json) shows the same caveat.
The figures themselves: real runs stored and read back from a real SQLite file."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import cli
from factories import run_record, stored

from diag import figure, store

PACKAGE = Path(__file__).resolve().parent.parent / "diag"
# a column named as a key ("timing_noisy") or a template's attribute (run.timing_noisy)
TRUST_COLUMNS = re.compile(r"[\"'](timing|compile)_(noisy|note)[\"']|\brun\.(timing|compile)_(noisy|note)\b")
WRITERS = {"figure.py", "run/measured.py"}  # the reader, and where the judgement is made


def test_only_the_figure_module_reads_a_figure_s_trust():
    readers = sorted(
        str(path.relative_to(PACKAGE))
        for path in [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.j2")]
        if TRUST_COLUMNS.search(path.read_text(encoding="utf-8"))
        and str(path.relative_to(PACKAGE)) not in WRITERS
        and not str(path.relative_to(PACKAGE)).startswith("store/")
    )
    assert readers == []


STEPS = [0.0010 + 0.00001 * (i % 7) for i in range(24)]


def _timed(db: str, **columns) -> int:
    timings = [{"mode": "compiled", "metric": "decode_step", "unit": "s", "samples": json.dumps(STEPS)}]
    base = {"compile_s": 12.5, "eager_ms_per_token": 2.0, "compiled_ms_per_token": 1.0}
    base |= {"compiled_ms_low": 0.99, "compiled_ms_high": 1.02}
    return stored(db, run_record(timings=timings, **(base | columns)))


def test_each_figure_carries_its_interval_its_samples_and_its_trust(tmp_path):
    db = str(tmp_path / "f.db")
    steady = _timed(db, uid="s", timing_noisy=0, compile_noisy=0)
    noisy = _timed(db, uid="n", timing_noisy=1, timing_note="timing noisy (compiled steps spread 4.7x)")
    unjudged = _timed(db, uid="u", device="cuda")
    read = {run_id: figure.of_run(store.get_run(store.open_db(db), run_id)) for run_id in (steady, noisy, unjudged)}
    compiled = read[steady]["compiled_ms_per_token"]
    assert (compiled.value, compiled.low, compiled.high, compiled.n, compiled.trust) == (1.0, 0.99, 1.02, 24, "steady")
    assert compiled.comparable and read[steady]["compile_s"].trust == "steady"
    assert read[noisy]["compiled_ms_per_token"].trust == "noisy" and not read[noisy]["compiled_ms_per_token"].comparable
    assert "spread 4.7x" in read[noisy]["eager_ms_per_token"].why
    # neither judged: said so, with why, and still compared (its caveat shown beside it)
    assert read[unjudged]["compiled_ms_per_token"].trust == "unjudged"
    assert "cuda is not checked for waiting" in read[unjudged]["compile_s"].why
    # every surface that prints the run says the same
    shown = cli("show", str(unjudged), "--db", db).output
    assert "timing unjudged: no interval of its steps was stored" in shown
    assert "compile time unjudged: a compile on cuda" in shown
    assert "(95% 0.990-1.020, 24 samples)" in cli("show", str(steady), "--db", db).output
    assert "unjudged" in cli("runs", "--db", db).output
    as_json = json.loads(cli("show", str(noisy), "--db", db, "--json").output)
    assert as_json["figures"]["compiled_ms_per_token"] | {"why": None} == {
        "name": "compiled_ms_per_token",
        "value": 1.0,
        "unit": "ms/token",
        "trust": "noisy",
        "low": 0.99,
        "high": 1.02,
        "n": 24,
        "why": None,
    }
    listed = json.loads(cli("runs", "--db", db, "--json").output)
    assert {r["id"]: r["figures"]["compile_s"]["trust"] for r in listed} == {
        steady: "steady",
        noisy: "unjudged",
        unjudged: "unjudged",
    }
    assert listed[-1]["figures"]["compiled_ms_per_token"]["low"] == 0.99
    site = tmp_path / "site"
    assert cli("report", "--db", db, "--out", str(site)).exit_code == 0
    page = "".join(p.read_text() for p in (site / "runs").glob("*.html"))
    assert "unjudged: a compile on cuda" in page and "95% 0.990-1.020, 24 samples" in page
