"""diag race: compiled variants timed side by side in one probe, judged by paired rounds."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from conftest import diag, diag_here

from diag import race, variants

REPO = Path(__file__).resolve().parents[1]
BENCH_CASES = REPO / "bench" / "cases"


def _record(a, b, **extra):
    return {"variants": ["a", "b"], "generation_median_s": {"a": a, "b": b}, "errors": {}, **extra}


def _drifting(rounds, effect, seed):
    """Per-round medians on a host whose speed moves by up to 2x between rounds (another process
    taking and leaving the cores), B ``effect`` slower than A within each round."""
    rng = random.Random(seed)
    a, b = [], []
    for i in range(rounds):
        speed = 1.0 if (i // 7) % 2 == 0 else 2.0 + rng.random()
        a.append(1e-3 * speed * (1 + rng.gauss(0, 0.01)))
        b.append(1e-3 * speed * (1 + effect) * (1 + rng.gauss(0, 0.01)))
    return a, b


def test_a_five_percent_slower_variant_is_found_through_a_host_that_doubles_its_speed():
    a, b = _drifting(80, 0.05, 1)
    (verdict,) = race.judge(_record(a, b))
    assert verdict.verdict == "slower" and verdict.low > 1.03 and abs(verdict.ratio - 1.05) < 0.01
    # The same samples judged as two unpaired sets, as runs timed apart are: the drift hides the 5%.
    low, high = variants.ratio_interval(a, b)
    assert low < 1 < high


def test_the_same_variant_twice_is_no_difference_and_faster_is_faster():
    a, same = _drifting(80, 0.0, 2)
    assert race.judge(_record(a, same))[0].verdict == "no difference"
    a, quicker = _drifting(80, -0.05, 3)
    assert race.judge(_record(a, quicker))[0].verdict == "faster"


def test_too_few_rounds_and_scattered_pairs_get_no_speed_verdict():
    a, b = _drifting(4, 0.2, 4)
    assert race.judge(_record(a, b))[0].verdict == "too few rounds"
    rng = random.Random(5)
    a = [1e-3] * 40
    scattered = [1e-3 * rng.choice([0.5, 1.0, 2.0]) for _ in range(40)]
    (verdict,) = race.judge(_record(a, scattered))
    assert verdict.verdict == "noisy" and verdict.ratio is not None


@pytest.mark.parametrize(
    "args, said",
    [
        (["--case", "append_last"], "two or more different cases"),
        (["--case", "append_last", "--case", "append_last"], "two or more different cases"),
        (["--case", "append_last", "--case", "nope"], "unknown case 'nope'"),
        (["--case", "append_last", "--case", "dynamic_slice", "--profile"], "--profile"),
        (["--case", "append_last", "--case", "dynamic_slice", "--torch", "2.x"], "2.x"),
    ],
)
def test_bad_input_is_one_line(args, said, tmp_path):
    done = diag_here("race", *args, cwd=tmp_path)
    assert done.returncode != 0 and said in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_real_race_finds_the_slower_twin_and_names_a_variant_that_does_not_compile(tmp_path):
    """Three cases in one probe on the eager backend: bench_extra_cost, its twin 30% slower at each
    decode step, and dynamic_slice, whose data-dependent slice fullgraph refuses."""
    args = ["race", "--case", str(BENCH_CASES / "extra_cost.py"), "--case", str(BENCH_CASES / "extra_cost_twin.py")]
    args += ["--case", "dynamic_slice", "--backend", "eager", "--fullgraph", "--new-tokens", "6"]
    args += ["--timing-seconds", "0.5"]
    slowed = {"DIAG_BENCH_SLOWDOWN_TWIN": "0.3", "DIAG_BENCH_SLOWDOWN": "0"}
    found = json.loads(diag(*args, "--json", cwd=tmp_path, env_extra=slowed).stdout)
    (raced,) = found["races"]
    (verdict,) = raced["verdicts"]
    assert (verdict["a"], verdict["b"], verdict["verdict"]) == ("bench_extra_cost", "bench_extra_cost_twin", "slower")
    assert 1.15 < verdict["ratio"] < 1.5 and verdict["rounds"] >= race.MIN_ROUNDS
    assert set(raced["errors"]) == {"dynamic_slice"}
    assert raced["errors"]["dynamic_slice"]["error_location"].endswith("dynamic_slice.py:24")
    assert raced["threads"] == 1 and found["build"]["torch_version"]
    text = diag(*args, cwd=tmp_path, env_extra=slowed).stdout
    assert "bench_extra_cost_twin / bench_extra_cost:" in text and "slower" in text
    assert "dynamic_slice: not raced" in text
