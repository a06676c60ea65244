"""Sharding: the shares of N workers are the whole matrix, each unit once, balanced by cost; bad
shard input is one line and writes nothing. (The real sharded runs, under Slurm too: test_scale_out.py.)"""

from __future__ import annotations

import json
import re
import shlex
import statistics
from collections import Counter
from pathlib import Path

import nightly_index
import pytest
from conftest import diag_here

from diag import row as rows
from diag.cli import sharding
from diag.run import matrix, shard

# Parts that differ in what a unit holds: untimed (one spec a unit), timed (every spec of the part in
# one unit), a sweep (configs that differ only in size), repeats, and a case file named like a built-in.
PARTS = [
    "--case all --torch current --torch 2.13.0 --backend eager --no-timing",
    "--case append_last --case dynamic_slice --torch 2.14.1 --torch 2.13.0 --repeat 3 --fullgraph",
    "--case append_last --backend aot_eager --sweep batch --sweep-values 1,2,4 --no-timing --repeat 2",
]


def _jobs(parts: list[matrix.Part], keys) -> Counter:
    """Every run the parts plan (those of ``keys`` where given), with its repeat, as a multiset."""
    return Counter(
        (part.index, repeat, spec, case.name, case.path, repr(config))
        for part in parts
        for repeat, spec, case, config in part.runs_of(keys)
    )


def _planned(tmp_path: Path, shards: int, parts: list[str] = PARTS) -> dict:
    args = [arg for part in parts for arg in ("--part", part)]
    done = diag_here("plan", *args, "--shards", str(shards), "--out", "plan.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return json.loads((tmp_path / "plan.json").read_text())


@pytest.mark.parametrize("shards", [1, 2, 7, 64])
def test_the_shares_together_are_the_unsharded_plan_with_no_run_twice(tmp_path, shards):
    document = _planned(tmp_path, shards)
    whole = [sharding.parse_part(i, shlex.split(args), "test") for i, args in enumerate(PARTS)]
    matrix.resolve_cases(whole, print)
    unsharded = _jobs(whole, None)
    assert sum(unsharded.values()) == 4 * 2 * 2 + 2 * 2 * 3 + 3 * 2 * 2  # cases x fullgraphs x specs x repeats
    union: Counter = Counter()
    keys_seen: Counter = Counter()
    for index in range(shards):
        parts, keys = sharding.read_plan(str(tmp_path / "plan.json"), shard.Shard(index, shards))
        union += _jobs(parts, keys)
        keys_seen.update(keys)
    assert union == unsharded
    assert set(keys_seen.values()) == {1}
    assert len(document["shares"]) == shards
    if shards == 64:  # more workers than units: some shares are empty, and the Actions matrix skips them
        jobs = json.loads(diag_here("plan", "--part", PARTS[0], "--shards", "64", "--json", cwd=tmp_path).stdout)
        assert len(jobs["include"]) == 16 and all(job["runs"] == 1 for job in jobs["include"])


def test_a_timed_unit_holds_every_build_of_its_part_and_an_untimed_one_a_single_build(tmp_path):
    document = _planned(tmp_path, 3)
    keys = [key for share in document["shares"] for key in share["units"]]
    timed = [key for key in keys if key.startswith("part 1 ")]
    untimed = [key for key in keys if key.startswith("part 0 ")]
    assert timed and all("| 2.14.1 + 2.13.0 |" in key for key in timed)
    assert untimed and all(" + " not in key for key in untimed)


def test_workers_that_plan_for_themselves_get_the_plan_files_shares(tmp_path):
    """`diag run ... --shard K/N` plans in place; its share is the one `diag plan --out` wrote."""
    document = _planned(tmp_path, 5, PARTS[:1])
    part = sharding.part_of(0, [], _run_params(PARTS[0]))
    for index in range(5):
        planned = matrix.plan([part], 5, None, print).share_keys(index)
        assert planned == set(document["shares"][index]["units"])


def _run_params(args: str) -> dict:
    from diag.cli import cli

    with cli.commands["run"].make_context("diag run", shlex.split(args)) as ctx:
        return dict(ctx.params)


@pytest.mark.parametrize(
    "value, said",
    [
        ("4/4", "K must be below N"),
        ("0/0", "N must be 1 to 256"),
        ("3/x", "expected K/N"),
        ("-1/3", "expected K/N"),
        ("1/257", "N must be 1 to 256"),
        ("auto", "none of the scheduler variables is set (SLURM_ARRAY_TASK_ID"),
    ],
)
def test_bad_shard_input_is_one_line_and_writes_nothing(tmp_path, monkeypatch, value, said):
    for _, index, count in shard.SCHEDULERS:
        monkeypatch.delenv(index, raising=False)
        monkeypatch.delenv(count, raising=False)
    done = diag_here("run", "--case", "append_last", "--shard", value, "--db", "out.db", cwd=tmp_path)
    assert done.returncode != 0 and said in done.stderr
    assert done.stderr.count("\n") == 1 and done.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_plan_refuses_bad_input_in_one_line(tmp_path):
    for args, said in [
        (["--shards", "0"], "0 is not in the range 1<=x<=256"),
        (["--shards", "300", "--part", "--case all"], "300 is not in the range"),
        (["--shards", "2"], "give --matrix FILE or --part"),
        (["--shards", "2", "--part", "--case nope"], "unknown case 'nope'"),
        (["--shards", "2", "--part", "--case all --db x.db"], "part 0 gives --db, an option of the whole invocation"),
        (["--shards", "2", "--part", "--case all --backend fast"], "part 0 (--case all --backend fast)"),
        (["--shards", "2", "--matrix", "missing.toml"], "'--matrix': 'missing.toml': no such file"),
    ]:
        done = diag_here("plan", *args, cwd=tmp_path)
        assert done.returncode != 0 and said in done.stderr, (args, done.stderr)
        assert done.stderr.count("\n") == 1, done.stderr
    (tmp_path / "bad.toml").write_text("[[part]]\nrun = 3\n")
    done = diag_here("plan", "--matrix", "bad.toml", "--shards", "2", cwd=tmp_path)
    assert "expected [[part]] tables" in done.stderr and done.stderr.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]


def test_a_plan_run_with_another_shard_count_is_refused(tmp_path):
    _planned(tmp_path, 4, PARTS[:1])
    done = diag_here("run", "--plan", "plan.json", "--shard", "1/3", "--db", "out.db", cwd=tmp_path)
    assert done.returncode == 1 and "--plan plan.json has 4 shards, --shard asks for 1/3" in done.stderr
    done = diag_here("run", "--plan", "plan.json", "--db", "out.db", cwd=tmp_path)
    assert done.returncode == 2 and "--plan shards a matrix: give --shard K/N too" in done.stderr
    assert not (tmp_path / "out.db").exists()


@pytest.mark.parametrize(
    "environ, expected",
    [
        ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0"}, "3/4"),
        ({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "1"}, "3/4"),
        ({"JOB_COMPLETION_INDEX": "0", "JOB_COMPLETIONS": "8"}, "0/8"),
        ({"BUILDKITE_PARALLEL_JOB": "5", "BUILDKITE_PARALLEL_JOB_COUNT": "6"}, "5/6"),
        # --array=1-7:2 (ids 1, 3, 5, 7) and --array=1,3,5,7 (evenly spaced all the same): the 2nd id is share 1
        (
            {
                "SLURM_ARRAY_TASK_ID": "3",
                "SLURM_ARRAY_TASK_COUNT": "4",
                "SLURM_ARRAY_TASK_MIN": "1",
                "SLURM_ARRAY_TASK_MAX": "7",
                "SLURM_ARRAY_TASK_STEP": "2",
            },
            "1/4",
        ),
        (
            {
                "SLURM_ARRAY_TASK_ID": "7",
                "SLURM_ARRAY_TASK_COUNT": "4",
                "SLURM_ARRAY_TASK_MIN": "1",
                "SLURM_ARRAY_TASK_MAX": "7",
                "SLURM_ARRAY_TASK_STEP": "2",
            },
            "3/4",
        ),
        ({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "1", "SLURM_ARRAY_TASK_MIN": "5"}, "0/1"),
    ],
)
def test_auto_reads_each_schedulers_variables(environ, expected):
    assert str(shard.from_environ(environ)) == expected


def test_auto_names_the_missing_count():
    with pytest.raises(shard.ShardError, match="JOB_COMPLETION_INDEX is set .* but JOB_COMPLETIONS is not"):
        shard.from_environ({"JOB_COMPLETION_INDEX": "1"})
    with pytest.raises(shard.ShardError, match="K must be below N") as caught:
        shard.from_environ({"BUILDKITE_PARALLEL_JOB": "6", "BUILDKITE_PARALLEL_JOB_COUNT": "6"})
    assert "BUILDKITE_PARALLEL_JOB=6 and BUILDKITE_PARALLEL_JOB_COUNT=6" in str(caught.value)
    assert "--shard 6/6" not in str(caught.value)


@pytest.mark.parametrize(
    "environ, said",
    [
        # the variable that is wrong is the one named, whichever it is
        (
            {"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "xyz"},
            "SLURM_ARRAY_TASK_MIN='xyz' is not a whole number",
        ),
        ({"JOB_COMPLETION_INDEX": "-1", "JOB_COMPLETIONS": "4"}, "JOB_COMPLETION_INDEX='-1' is not a whole number"),
        # --array=1,3,6: no even spacing, so no share is right for any id
        (
            {
                "SLURM_ARRAY_TASK_ID": "3",
                "SLURM_ARRAY_TASK_COUNT": "3",
                "SLURM_ARRAY_TASK_MIN": "1",
                "SLURM_ARRAY_TASK_MAX": "6",
                "SLURM_ARRAY_TASK_STEP": "1",
            },
            "not evenly spaced",
        ),
        # --array=1,3,5,7 where Slurm gives no step: ids 1..7 are not 4 ids apart by 1
        (
            {
                "SLURM_ARRAY_TASK_ID": "5",
                "SLURM_ARRAY_TASK_COUNT": "4",
                "SLURM_ARRAY_TASK_MIN": "1",
                "SLURM_ARRAY_TASK_MAX": "7",
            },
            "not evenly spaced",
        ),
    ],
)
def test_auto_refuses_what_names_no_share_and_names_the_variable(environ, said):
    with pytest.raises(shard.ShardError, match=re.escape(said)):
        shard.from_environ(environ)


def test_recorded_durations_cost_the_rows(tmp_path, recorded_db):
    """With --history, a row costs the median of its recorded runs' passes, not the estimate."""
    from diag import store

    runs = list(store.open_db(recorded_db).query("select * from runs"))
    costs = matrix.history_costs(str(recorded_db), print)
    timed = [run for run in runs if run["case"] == "append_last" and run["fullgraph"] and run["timing_pass_s"]]
    assert timed, "the recorded runs carry their passes' durations"
    row = rows.of(timed[0])
    same = [run for run in timed if rows.of(run) == row]
    spent = [run["duration_s"] for run in same]
    assert costs[(row, True)] == pytest.approx(statistics.median(spent))
    part = (
        f"--case append_last --fullgraph --backend {row.backend} --batch-size {row.batch_size} "
        f"--prompt-length {row.prompt_length} --new-tokens {row.new_tokens}"
    )
    estimated = _planned(tmp_path, 1, [part])["shares"][0]["estimate_s"]
    assert estimated == pytest.approx(shard.estimate(row.backend, True, False), abs=0.1)
    args = ["plan", "--part", part, "--shards", "1", "--history", str(recorded_db), "--out", "costed.json"]
    assert diag_here(*args, cwd=tmp_path).returncode == 0
    costed = json.loads((tmp_path / "costed.json").read_text())["shares"][0]["estimate_s"]
    assert costed == pytest.approx(statistics.median(spent), abs=0.1)  # "current": nothing to provision


def test_balance_keeps_a_build_on_one_worker_unless_that_lengthens_the_longest_share():
    pair = [shard.Unit(f"{spec}-{i}", (spec,), 10.0, 1) for spec in ("2.13.0", "2.14.1") for i in range(4)]
    together = shard.balance(pair, 2)  # each worker provisions one build: 160 s each, not 290
    assert sorted({unit.specs for unit in share} for share in together.shares) == [{("2.13.0",)}, {("2.14.1",)}]
    assert together.loads() == [160.0, 160.0]
    one = [shard.Unit(f"u{i}", ("2.13.0",), 10.0, 1) for i in range(4)]
    assert max(shard.balance(one, 2).loads()) == 140.0  # two installs (2 x 130 s) beat one worker's 160 s
    heavy = [shard.Unit(f"h{i}", ("2.13.0",), 500.0, 1) for i in range(4)]
    spread = shard.balance(heavy, 2)
    assert [len(share) for share in spread.shares] == [2, 2] and shard.spread(spread) == 1.0
    costs = [7.0, 300.0, 3.0, 40.0, 41.0, 90.0, 15.0, 15.0, 120.0, 8.0] * 20
    uneven = [shard.Unit(f"r{i:03d}", ("current",), cost, 1) for i, cost in enumerate(costs)]
    assert shard.spread(shard.balance(uneven, 16)) < 1.05
    assert shard.balance(uneven, 16).shares == shard.balance(list(reversed(uneven)), 16).shares
    assert shard.balance([], 3).shares == [[], [], []]


def test_plan_pins_nightly_to_todays_dated_build(tmp_path, monkeypatch):
    """Every worker of a saved plan runs the same nightly, whenever it starts (a local stand-in of the
    nightly index on 127.0.0.1: the real one cannot be reached from the test machine)."""
    monkeypatch.setenv("DIAG_HOME", str(tmp_path / "home"))
    root = tmp_path / "www"
    nightly_index.stand_ins(root, (4, 5), listed=(4, 5))
    with nightly_index.Server(root) as server:
        part = f"--case append_last --torch nightly --torch 2.13.0 --index-url {server.url}/nightly/cpu --no-timing"
        document = _planned(tmp_path, 2, [part])
    (args,) = document["parts"]
    assert args[args.index("--torch") + 1] == "2.14.0.dev20260105" and "nightly" not in args
    specs = {key.split(" | ")[1] for share in document["shares"] for key in share["units"]}
    assert specs == {"2.14.0.dev20260105", "2.13.0"}
