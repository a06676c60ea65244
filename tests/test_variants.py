"""Variant against variant on one build (diag compare --case A --case B): pairing, ratio, interval, verdict."""

from __future__ import annotations

import json
import random

from conftest import diag_here
from test_regress import _run

from diag.verdicts import variants


def _runs(case, step_s, count, seed, noisy=False, **fields):
    rng = random.Random(seed)
    made = []
    for i in range(count):
        run = _run(seed * 100 + i, samples=[step_s * (1 + rng.gauss(0, 0.01)) for _ in range(30)], **fields)
        run["case"], run["timing_noisy"] = case, int(noisy)
        made.append(run)
    return made


def _verdicts(points):
    return [(p.point, p.mode, p.verdict) for p in points]


def test_a_and_a_is_no_difference_and_a_five_percent_slowdown_is_slower():
    base = _runs("append_last", 1e-3, 5, 1)
    same = _runs("append_last_again", 1e-3, 5, 2)
    slower = _runs("dynamic_slice", 1.05e-3, 5, 3)
    faster = _runs("mine", 0.95e-3, 5, 4)
    (aa,) = variants.compare(base, same)
    assert aa.verdict == "no difference" and aa.low < 1 < aa.high and aa.mode == "compiled"
    (ab,) = variants.compare(base, slower)
    assert ab.verdict == "slower" and 1 < ab.low < ab.ratio < ab.high and abs(ab.ratio - 1.05) < 0.02
    assert variants.compare(base, faster)[0].verdict == "faster"
    assert variants.compare(base, slower) == [ab]  # a fixed seed: the same runs, the same interval


def test_noisy_runs_are_left_out_and_a_side_without_steady_runs_is_noisy():
    base = _runs("a", 1e-3, 5, 1)
    (point,) = variants.compare(base, _runs("b", 2e-3, 5, 2, noisy=True))
    assert (point.verdict, point.ratio, point.runs_b) == ("noisy", None, 0)
    mixed = [*_runs("b", 1e-3, 4, 3), *_runs("b", 9e-3, 1, 4, noisy=True)]
    (point,) = variants.compare(base, mixed)
    assert point.verdict == "no difference" and point.runs_b == 4
    (single,) = variants.compare(base[:1], mixed[:1])
    assert single.verdict == "too few runs" and single.low is None


def test_each_point_of_a_sweep_is_its_own_pair_and_other_configs_do_not_pair():
    a = [*_runs("a", 1e-3, 3, 1, batch_size=1), *_runs("a", 2e-3, 3, 2, batch_size=4)]
    b = [*_runs("b", 1e-3, 3, 3, batch_size=1), *_runs("b", 2.4e-3, 3, 4, batch_size=4)]
    b += _runs("b", 1e-3, 3, 5, batch_size=1, backend="inductor")  # no twin among a's runs
    assert _verdicts(variants.compare(a, b)) == [
        ("eager fullgraph cpu float32 b1 p16 n16", "compiled", "no difference"),
        ("eager fullgraph cpu float32 b4 p16 n16", "compiled", "slower"),
    ]


def test_compare_two_variants_on_a_recorded_history(copied_db, tmp_path):
    done = diag_here(
        "compare", "--case", "append_last", "--case", "dynamic_slice", "--db", str(copied_db), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("compared: dynamic_slice against append_last on torch 2.14.0.dev20260101+cpu")
    body = json.loads(
        diag_here(
            "compare", "--case", "append_last", "--case", "dynamic_slice", "--build", "2.13.0", "--json",
            "--db", str(copied_db), cwd=tmp_path,
        ).stdout
    )  # fmt: skip
    assert body["build"] == "2.13.0+cpu" and body["points"]
    assert {p["verdict"] for p in body["points"]} <= {"faster", "slower", "no difference", "noisy", "too few runs"}
    for args, said in (
        (["--case", "append_last"], "takes --case A --case B"),
        (["1", "2", "--case", "a", "--case", "b"], "takes --case A --case B"),
        (["--case", "append_last", "--case", "nope"], "no runs of both 'append_last' and 'nope'"),
        (["1"], "compare needs A and B"),
    ):
        done = diag_here("compare", *args, "--db", str(copied_db), cwd=tmp_path)
        assert done.returncode != 0 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done


def test_a_user_case_file_named_like_a_built_in_is_never_pooled_with_it(tmp_path):
    """A DB holding the built-in append_last and a user's append_last.py on one build: --case
    append_last names two rows, so compare refuses in one line; the file's path chooses one."""
    from conftest import recorded_timed, replay

    user = tmp_path / "mine" / "append_last.py"
    user.parent.mkdir()
    user.write_text("# a user's own append_last\n")
    made = [recorded_timed(tmp_path / "runs", f"b{i}", step_s=1.4e-3, seed=i) for i in range(5)]
    made += [
        recorded_timed(
            tmp_path / "runs", f"u{i}", step_s=36e-3, seed=10 + i, case_path=str(user), case_source=str(user)
        )
        for i in range(5)
    ]
    made += [
        recorded_timed(tmp_path / "runs", f"s{i}", step_s=2.9e-3, seed=20 + i, case="dynamic_slice") for i in range(5)
    ]
    db = tmp_path / "h.db"
    replay(made, db)
    done = diag_here("compare", "--case", "append_last", "--case", "dynamic_slice", "--db", str(db), cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "names runs of 2 case files" in done.stderr and str(user) in done.stderr and "builtin" in done.stderr
    for chosen, ratio in ((str(user), 2.9 / 36), (str(user.relative_to(tmp_path)), 2.9 / 36)):
        body = json.loads(
            diag_here(
                "compare", "--case", chosen, "--case", "dynamic_slice", "--json", "--db", str(db), cwd=tmp_path
            ).stdout
        )
        (point,) = [p for p in body["points"] if p["mode"] == "compiled"]
        assert abs(point["ratio"] - ratio) < 0.1 * ratio and point["runs_a"] == 5, point
