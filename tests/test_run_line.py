"""A run line fits 120 columns under its header, with its figures rounded to what they carry and how
far to trust them; --verbose and show keep every figure. Real SQLite files, the real command line."""

from __future__ import annotations

import re

from conftest import cli
from factories import run_record, stored

from diag import text

LONG = "a_case_name_longer_than_its_column_allows"
SHAPES = [
    {"case": "append_last", "graph_break_count": 0, "recompile_count": 0, "hidden_error_count": 0},
    {
        "case": LONG,
        "case_source": "/home/someone/a/very/long/folder/of/cases/" + LONG + ".py",
        "backend": "aot_eager",
        "fullgraph": 0,
        "dtype": "bfloat16",
        "batch_size": 128,
        "status": "fullgraph_error",
        "graph_break_count": 1234,
        "recompile_count": 999,
        "hidden_error_count": 77,
        "compile_s": 1234.5678,
        "eager_ms_per_token": 1234.5678,
        "compiled_ms_per_token": 0.000123,
        "timing_noisy": 1,
        "timing_note": "timing noisy (eager steps spread 8.2x p90/p10, host reference 7.7x), load 4.7 on 2 cores",
        "compile_noisy": 1,
        "compile_note": "compile shared the cores: for 57.6 s of its 58.2 s some task waited for a CPU",
        "compile_instructions": 123456789012,
    },
    {"case": "segfault", "status": "crash"},
    {
        "case": "x",
        "compile_s": 7.7312,
        "eager_ms_per_token": 0.70312,
        "compiled_ms_per_token": 12.345,
        "timing_noisy": 0,
    },
]


def _listed(tmp_path, *args: str) -> list[str]:
    db = tmp_path / "h.db"
    for index, shape in enumerate(SHAPES):
        stored(db, run_record(uid=f"u{index}", **shape))
    done = cli("runs", "--db", str(db), *args)
    assert done.exit_code == 0, done.output
    return done.output.splitlines()


def test_every_run_line_fits_120_columns_under_its_header_and_says_how_far_to_trust_it(tmp_path):
    lines = _listed(tmp_path)
    assert lines[0] == text.RUN_HEADER and lines[1].startswith("torch ")
    runs = [line for line in lines if line.startswith("#")]
    assert len(runs) == len(SHAPES)
    assert all(len(line) <= 120 for line in lines), [len(line) for line in lines]
    by_case = {line.split()[1][:8]: line for line in runs}
    both = by_case["a_case_n"]
    assert both.endswith("noisy; compile waited") and "…" in both and "1234b 999r…" in both
    assert by_case["x"].split()[-3:] == ["7.73s", "0.703/12.3", "steady"]
    assert by_case["segfault"].split()[-5:] == ["crash", "-", "-", "-", "-"]
    assert "/home/someone" not in "\n".join(runs)  # the case file is in --verbose and show
    # each column starts where the header names it
    status_at = text.RUN_HEADER.index("status")
    assert all(line[status_at:].split()[0] in ("pass", "fullgraph_error", "crash") for line in runs)


def test_verbose_keeps_every_figure_and_the_whole_reason(tmp_path):
    lines = _listed(tmp_path, "--verbose")
    both = next(line for line in lines if LONG in line)
    assert "eager steps spread 8.2x p90/p10" in both and "some task waited for a CPU" in both
    assert "/home/someone/a/very/long/folder/of/cases/" in both and "123.457G instr" in both


def test_show_rounds_its_figures_and_leaves_no_section_empty(tmp_path):
    db = tmp_path / "h.db"
    run_id = stored(
        db,
        run_record(
            duration_s=14.51046877599947,
            eager_margin=0.4290008544921875,
            max_abs_diff=1000.0,
            orchestrator_s=0.0014,
            tokens_equal=0,
            graph_break_count=0,
            recompile_count=0,
            hidden_error_count=0,
        ),
    )
    said = cli("show", str(run_id), "--db", str(db)).output
    assert not re.search(r"\d\.\d{5,}", said), said  # no figure past what it can carry
    assert "duration_s: 14.5 s" in said and "eager_margin: 0.429" in said and "orchestrator under 0.01 s" in said
    lines = said.splitlines()
    for index, line in enumerate(lines):
        if line and set(line) == {"-"}:  # a section's rule: something is said under it
            assert index + 1 < len(lines) and lines[index + 1].strip(), lines[index - 1]
