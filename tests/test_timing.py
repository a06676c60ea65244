"""The timing pass: a separate process with logging off, raw samples stored."""

from __future__ import annotations

from conftest import diag, show


def test_timing_pass_stores_latency_samples_and_compile_time(tmp_path):
    db = tmp_path / "t.db"
    diag("run", "--case", "append_last", "--backend", "aot_eager", "--fullgraph", "--new-tokens", "5",
         "--repeats", "3", "--db", str(db), cwd=tmp_path)
    run = show(db, 1, tmp_path)
    assert run["status"] == "pass"
    assert run["eager_ms_per_token"] > 0 and run["compiled_ms_per_token"] > 0
    assert run["compile_s"] is not None and run["compile_s"] >= 0
    assert run["peak_mem_eager_mb"] > 0 and run["memory_kind"] == "rss_high_water"
    samples = {(t["pass"], t["metric"]): t["samples"] for t in run["timings"]}
    # 3 repeats x (5 - 1) decode steps each.
    assert len(samples[("eager", "decode_step")]) == 12
    assert len(samples[("compiled", "decode_step")]) == 12
    assert "time.stderr.txt" in run["artifacts"]
    assert "torch_debug.log" in run["artifacts"]
