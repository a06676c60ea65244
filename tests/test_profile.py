"""``diag run --profile``: an eager and a compiled generation under torch.profiler, kept as a Chrome
trace in the run directory and summarised on the run page. A real run and a real trace."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import diag, run_section, show


@pytest.mark.slow
def test_profile_is_a_chrome_trace_linked_from_the_run_page(tmp_path):
    db = tmp_path / "p.db"
    done = diag(
        "run",
        "--case",
        "append_last",
        "--backend",
        "eager",
        "--fullgraph",
        "--new-tokens",
        "4",
        "--repeats",
        "1",
        "--timing-seconds",
        "0",
        "--profile",
        "--db",
        str(db),
        "--json",
        cwd=tmp_path,
    )
    run = show(db, json.loads(done.stdout)[0]["id"], tmp_path)
    profile = run["extra"]["profile"]
    trace = Path(run["artifacts_dir"]) / profile["trace"]
    with gzip.open(trace, "rt", encoding="utf-8") as handle:
        events = json.load(handle)["traceEvents"]  # Chrome trace format: what Perfetto opens
    names = {event.get("name") for event in events}
    assert {"diag: eager generation", "diag: compiled generation"} <= names
    assert any(str(name).startswith("Torch-Compiled Region") for name in names)
    assert profile["top"] and all(op["self_cpu_us"] >= 0 and op["calls"] >= 1 for op in profile["top"])
    assert profile["top"] == sorted(profile["top"], key=lambda op: -op["self_cpu_us"])
    out = tmp_path / "site"
    diag("report", "--db", str(db), "--out", str(out), "--carry-artifacts", cwd=tmp_path)
    page = run_section(out, run["id"])
    link = page[page.index("Profile (one") :].split('<a href="', 1)[1].split('"', 1)[0]
    assert (out / "runs" / link).resolve().read_bytes() == trace.read_bytes()  # the site's copy of the trace
    assert f"<code>{profile['top'][0]['op']}</code>" in page


def test_profile_without_the_timing_pass_is_refused(tmp_path):
    done = diag(
        "run",
        "--case",
        "append_last",
        "--profile",
        "--no-timing",
        "--db",
        str(tmp_path / "x.db"),
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 1 and "--profile" in done.stderr and len(done.stderr.strip().splitlines()) == 1
