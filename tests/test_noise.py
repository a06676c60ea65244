"""Whether a run's latency can be trusted: the interval of the median, two clusters of steps, the
verdict noisy, and what check and compare do with a noisy run. Pure: hand-made samples and runs."""

from __future__ import annotations

import random
import statistics

import pytest
from test_regress import _run

from diag import noise, verdict_text
from diag.stats import bimodal, median_interval
from diag.verdicts import gate, regress, timing_change


def _bootstrap(samples, resamples, rng):
    """The percentile interval of the median by plain resampling, to check the exact one against."""
    n = len(samples)
    medians = sorted(sorted(rng.choices(samples, k=n))[(n + 1) // 2 - 1] for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


@pytest.mark.parametrize("n", [7, 40, 301])
def test_the_exact_interval_of_the_median_is_the_bootstrap_one(n):
    rng = random.Random(n)
    samples = [rng.lognormvariate(0, 0.3) for _ in range(n)]
    low, high = median_interval(samples)
    ordered = sorted(samples)
    assert low <= statistics.median(samples) <= high
    boot_low, boot_high = _bootstrap(samples, 4000, rng)
    # the same order statistics, give or take one position for resampling's own noise
    assert abs(ordered.index(low) - ordered.index(boot_low)) <= max(1, n // 50)
    assert abs(ordered.index(high) - ordered.index(boot_high)) <= max(1, n // 50)
    assert median_interval(samples) == (low, high)  # no randomness: the same interval every time
    assert median_interval([]) is None and median_interval([2.0]) == (2.0, 2.0)


def test_two_clusters_are_found_and_a_few_stragglers_are_not():
    assert bimodal([0.5e-3] * 70 + [44e-3] * 30)
    assert not bimodal([0.5e-3] * 97 + [44e-3] * 3)  # a few stalls: the median holds
    assert not bimodal([0.5e-3 * (1 + i / 100) for i in range(100)])  # a smooth spread
    assert not bimodal([1.0, 3.0])  # two samples are not two clusters


def test_steady_steps_are_not_noisy_and_keep_their_intervals():
    rng = random.Random(3)
    steady = {mode: [1e-3 * (1 + rng.gauss(0, 0.02)) for _ in range(60)] for mode in ("eager", "compiled")}
    judged = noise.assess(steady, load=0.2, cpus=2)
    assert not judged.noisy and judged.note is None
    low, high = judged.intervals["eager"]
    assert low < statistics.median(steady["eager"]) * 1e3 < high and high - low < 0.03  # in ms


def test_a_busy_host_is_named_noisy_with_its_reasons_and_load():
    rng = random.Random(4)
    eager = [0.5e-3] * 40 + [44e-3] * 30  # the bimodal steps seen with two busy processes on 2 cores
    compiled = [0.25e-3 * (1 + rng.random()) for _ in range(70)]  # steady but spread: +-50% around the median
    judged = noise.assess({"eager": eager, "compiled": compiled}, load=3.0, cpus=2)
    assert judged.noisy
    assert judged.note.startswith("timing noisy (")
    assert "eager steps in two clusters" in judged.note and "load 3.0 on 2 cores" in judged.note
    assert "compiled median +-" not in judged.note or "%" in judged.note


def _timed(id_, step_s, seed, noisy=False, mode="compiled"):
    rng = random.Random(seed)
    run = _run(id_, samples=[step_s * (1 + rng.random() * 0.02) for _ in range(30)])
    run["timings"][0]["mode"] = mode
    run["timing_noisy"] = int(noisy)
    run["timing_note"] = "timing noisy (compiled steps in two clusters; load 3.0 on 2 cores)" if noisy else None
    return run


def test_a_noisy_run_gives_no_latency_verdict():
    thresholds = regress.Thresholds()
    before = [_timed(i, 1e-3, i) for i in range(5)]
    slower_but_noisy = [_timed(10 + i, 3e-3, i, noisy=True) for i in range(5)]
    judged = regress.compare_runs(before[-1], slower_but_noisy[-1], before, slower_but_noisy)
    assert regress.regressions(judged, thresholds, set()) == []
    assert [t.metric for t in judged.timings] == []
    assert regress.inconclusive(judged, thresholds) == []  # not a slowdown too few runs could judge: none judged
    (said,) = judged.noisy
    assert said.startswith("compiled latency not compared: 5 of 10 runs noisy") and "load 3.0 on 2 cores" in said
    assert judged.as_dict()["noisy"] == [said]
    # a noisy run among steady ones is left out, and the steady ones still judge
    mixed = [*[_timed(20 + i, 3e-3, i) for i in range(5)], _timed(30, 1e-3, 9, noisy=True)]
    judged = regress.compare_runs(before[-1], mixed[-1], before, mixed)
    (slowdown,) = regress.regressions(judged, thresholds, set())
    assert slowdown.kind == "slowdown" and "runs 5 -> 5" in slowdown.message


def test_check_says_which_latency_it_did_not_compare_and_why():
    before = [_timed(i, 1e-3, i) for i in range(5)]
    noisy = [_timed(10 + i, 3e-3, i, noisy=True) for i in range(5)]
    comparison = regress.compare_runs(before[-1], noisy[-1], before, noisy)
    lines = verdict_text.check_lines(gate.Outcome("b against a", [comparison], []))
    assert any(line.startswith("NOT COMPARED c eager") and "5 of 10 runs noisy" in line for line in lines), lines
    assert lines[-1] == "no regressions"


def test_a_compile_that_waited_for_the_machine_is_noisy_and_one_that_did_not_is_not():
    """On a CPU device a compile's wall time is its CPU time unless it waited: 92 s of wall for 15 s of
    CPU on a busy 2-core runner is noisy, with both figures and the load; a compile as long as its CPU
    time, a sub-second one, a GPU run's or one without a CPU time is not judged noisy."""
    said = noise.compile_noise(92.0, 15.1, "cpu", 5.8, 2)
    assert said == "compile waited: 92.0 s wall for 15.1 s CPU; load 5.8 on 2 cores"
    assert noise.compile_noise(15.5, 15.1, "cpu", 0.3, 2) is None
    assert noise.compile_noise(0.9, 0.3, "cpu", 4.0, 2) is None  # waited, but by less than a second
    assert noise.compile_noise(92.0, 15.1, "cuda:0", 5.8, 2) is None  # a GPU compile waits for its benchmarks
    assert noise.compile_noise(92.0, None, "cpu", 5.8, 2) is None


def test_a_compile_that_lost_its_parallelism_to_a_busy_machine_is_noisy():
    """Figures of bench/honesty.py --parts busy on 2 cores: idle, the compile runs beside inductor's
    workers in 17.8 s of wall for 23.7 s of CPU; with two processes spinning it takes 24.5 s for 24.2 s,
    so wall against CPU says nothing, but tasks waited for a CPU (PSI) through much of it."""
    said = noise.compile_noise(24.5, 24.2, "cpu", 2.9, 2, stall_s=19.0)
    assert said == "compile shared the cores: for 19.0 s of its 24.5 s some task waited for a CPU; load 2.9 on 2 cores"
    assert noise.compile_noise(17.8, 23.7, "cpu", 0.6, 2, stall_s=0.4) is None  # idle, in parallel
    assert noise.compile_noise(3.0, 3.0, "cpu", 2.0, 2, stall_s=0.9) is None  # stalled under a second
    assert noise.compile_noise(24.5, 24.2, "cuda:0", 2.9, 2, stall_s=19.0) is None
    assert noise.compile_noise(24.5, None, "cpu", None, None, stall_s=19.0).startswith("compile shared the cores")
    # no PSI on the kernel: judged on CPU time alone, as before
    assert noise.compile_noise(24.5, 24.2, "cpu", 2.9, 2, stall_s=None) is None


def test_a_compile_that_waited_gives_no_compile_verdict_in_check():
    """Two sides whose compile times differ x6 because one waited: no compile-time regression is drawn
    from the noisy side; the same figures not marked noisy are one."""
    steady = [1e-3] * 30
    before = [_run(i, samples=steady, compile_s=15.0) for i in range(1, 4)]
    after = [_run(i, samples=steady, compile_s=92.0, compile_noisy=1) for i in range(4, 7)]
    assert timing_change.compile_change(before, after) is None
    for run in after:
        run["compile_noisy"] = 0
    change = timing_change.compile_change(before, after)
    assert change is not None and change.ratio > 5


def test_steps_or_host_references_spread_wide_are_noisy_whatever_the_median_interval():
    """A mixed load seen on a shared runner: steps p10 2.50 / p90 11.73 ms and host references spread
    10x, yet the median's interval within +-10% over hundreds of steps: that run is not steady."""
    rng = random.Random(7)
    spread_steps = sorted(rng.uniform(2.5e-3, 11.7e-3) for _ in range(800))
    assert median_interval(spread_steps) is not None
    low, high = median_interval(spread_steps)
    assert max(statistics.median(spread_steps) - low, high - statistics.median(spread_steps)) < 0.1 * statistics.median(
        spread_steps
    )  # the interval alone would call it steady
    judged = noise.assess({"eager": spread_steps}, load=5.0, cpus=2)
    assert judged.noisy and "eager steps spread 3." in judged.note and "(p10 " in judged.note
    steady_steps = [1e-3 * (1 + rng.random() * 0.3) for _ in range(200)]
    references = [1e-3 * rng.choice([1, 1, 1, 10]) for _ in range(40)]
    judged = noise.assess({"compiled": steady_steps}, host={"compiled": references})
    assert judged.noisy and "compiled host reference spread 10.0x" in judged.note
    # an idle run's spread (steps up to 2.4x, host references up to 1.9x) stays steady
    idle_steps = [1e-3 * (1 + 1.4 * i / 199) for i in range(200)]
    idle_host = [1e-3 * (1 + 0.9 * i / 39) for i in range(40)]
    assert not noise.assess({"compiled": idle_steps}, host={"compiled": idle_host}).noisy
    # too few samples give no p10 or p90: nothing said of their spread
    assert not noise.assess({"compiled": [1e-3] * 8 + [9e-3]}, host={"compiled": [1e-3, 9e-3]}).noisy
    assert noise.spread([1.0] * 9) is None and noise.spread([1.0] * 10) == 1.0
