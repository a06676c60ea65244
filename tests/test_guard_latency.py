"""The guard check a decode call pays, gated by diag check like compile time: a slowdown needs the
ratio of the sides' medians past the threshold and the rank test; runs the host made noisy are left
out, as they are for latency. (A real run's figure: tests/test_timing.py.)"""

from __future__ import annotations

from diag import regress

ROW = {
    "case": "append_last",
    "case_source": "builtin",
    "backend": "eager",
    "fullgraph": 1,
    "dynamic": "auto",
    "mode": "default",
    "device": "cpu",
    "dtype": "float32",
    "batch_size": 1,
    "prompt_length": 16,
    "new_tokens": 16,
    "model": "tiny-random",
}


def _runs(base: float, noisy: int = 0) -> list[dict]:
    return [{**ROW, "status": "pass", "guard_latency_us": base + i, "timing_noisy": noisy} for i in range(5)]


def _found(before: list[dict], after: list[dict]) -> list[regress.Regression]:
    comparison = regress.compare_runs(before[-1], after[-1], before, after)
    return regress.regressions(comparison, regress.Thresholds(), set())


def test_a_guard_check_that_grew_by_half_is_a_slowdown():
    (found,) = _found(_runs(200), _runs(300))
    assert found.kind == "slowdown" and found.change.metric == "guard_latency_us"
    assert "guard_latency_us x1.49" in found.message and "threshold x1.15" in found.message


def test_within_the_threshold_or_from_noisy_runs_it_is_not():
    assert _found(_runs(200), _runs(220)) == []  # x1.10, under the 1.15 a compile-time figure needs
    assert _found(_runs(200), _runs(300, noisy=1)) == []  # the host made every run after noisy
    comparison = regress.compare_runs(_runs(200)[-1], _runs(300, noisy=1)[-1], _runs(200), _runs(300, noisy=1))
    assert all(change.metric != "guard_latency_us" for change in comparison.timings)
