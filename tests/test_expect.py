"""Count contracts with a ratchet: ``diag expect`` writes a row's exact counts from real runs, and
``diag check --expect`` fails on any count that moved, a graph break that comes and one that goes
alike, a recompile fewer as well, named by the count in the text, --json and JUnit, with the command
that takes the new counts; an inductor counter that moved, on runs stored as the probe stores them.
Real compiles (eager backend), real subprocesses, a real SQLite file. One torch is installed here:
where a test needs a second build, the stored build's version is rewritten to stand for it."""

from __future__ import annotations

import json
import sqlite3
import textwrap

import pytest
from conftest import cli, diag
from factories import run_record, stored

from diag.build import identity

CASE = textwrap.dedent(
    '''
    """append_last, with a graph break in its compiled step where DIAG_TEST_CONTRACT_BREAK is 1, and a
    small compiled function called on DIAG_TEST_CONTRACT_SHAPES more shapes than one (1: a recompile)."""
    import os

    from diag.cases.append_last import decode_step, drive
    from diag.probe.cases import case


    @case("contracted", "append_last, with a graph break where asked")
    def generate(gen):
        import torch

        def stepped(*args):
            if os.environ.get("DIAG_TEST_CONTRACT_BREAK") == "1":
                torch._dynamo.graph_break()
            return decode_step(*args)

        scale = gen.compile(lambda x: x * 2)
        for size in range(1, 2 + int(os.environ.get("DIAG_TEST_CONTRACT_SHAPES") or 0)):
            scale(torch.ones(size, 3, dtype=torch.int64))  # a second shape: a recompile (then dynamic)
        drive(gen, gen.compile(stepped))
    '''
)
RUN = ("--backend", "eager", "--no-fullgraph", "--no-timing", "--new-tokens", "4")


def _run(tmp_path, db, broken: bool, shapes: int = 0) -> None:
    env = {"DIAG_TEST_CONTRACT_BREAK": "1" if broken else "0", "DIAG_TEST_CONTRACT_SHAPES": str(shapes)}
    diag("run", "--case", str(tmp_path / "contracted.py"), *RUN, "--db", db, cwd=tmp_path, env_extra=env)


@pytest.mark.slow
def test_a_count_that_moves_either_way_fails_the_contract_by_name(tmp_path):
    (tmp_path / "contracted.py").write_text(CASE)
    db, contract = str(tmp_path / "c.db"), str(tmp_path / "counts.json")
    _run(tmp_path, db, broken=False, shapes=1)
    diag("expect", contract, "--db", db, cwd=tmp_path)
    written = json.loads((tmp_path / "counts.json").read_text())
    ((row, entry),) = written["rows"].items()
    assert row.startswith("contracted [") and entry["counts"]["graph_breaks"] == 0 and entry["counts"]["graphs"] >= 1
    # the same build again: every count as the contract holds it
    held = diag("check", "--db", db, "--expect", contract, cwd=tmp_path, check=False)
    assert held.returncode == 0 and "every count of 1 row(s) as the contract holds it" in held.stdout, held.stdout

    _run(tmp_path, db, broken=True)  # a graph break comes, and one recompile goes
    junit = tmp_path / "check.xml"
    moved = diag("check", "--db", db, "--expect", contract, "--junit", str(junit), cwd=tmp_path, check=False)
    assert moved.returncode == 1, moved.stdout + moved.stderr
    assert "COUNT MOVED contracted" in moved.stdout and "graph_breaks: expected 0, got " in moved.stdout
    assert "graph_breaks GB" in moved.stdout  # the break by its GB id
    assert "recompiles: expected 1, got 0 (fewer: an improvement" in moved.stdout  # the shape no longer called
    assert f"to take them: diag expect {contract} --db {db} --build BUILD" in moved.stdout
    xml = junit.read_text()
    assert '<testsuite name="diag expect" tests="1" failures="1">' in xml and "graph_breaks: expected 0" in xml
    as_json = json.loads(diag("check", "--db", db, "--expect", contract, "--json", cwd=tmp_path, check=False).stdout)
    assert {m["count"] for m in as_json["contract"]["moved"]} >= {"graph_breaks", "graph_breaks GB0025"}

    diag("expect", contract, "--db", db, cwd=tmp_path)  # the ratchet: the break taken on purpose
    _run(tmp_path, db, broken=False)  # ... and it goes away: an improvement fails too, until taken
    improved = diag("check", "--db", db, "--expect", contract, cwd=tmp_path, check=False)
    assert improved.returncode == 1 and "fewer: an improvement, taken by rewriting the contract" in improved.stdout


@pytest.mark.slow
def test_a_count_that_differs_on_one_torch_version_lives_in_its_section(tmp_path):
    (tmp_path / "contracted.py").write_text(CASE)
    db, contract = str(tmp_path / "c.db"), str(tmp_path / "counts.json")
    _run(tmp_path, db, broken=False)
    diag("expect", contract, "--db", db, cwd=tmp_path)
    with sqlite3.connect(db) as conn:  # this build stands for the older one; the next runs are 2.13's
        conn.execute("UPDATE torch_builds SET version = '2.12.0+cpu', git_version = 'old', build_key = 'old'")
    _run(tmp_path, db, broken=True)
    assert diag("check", "--db", db, "--expect", contract, cwd=tmp_path, check=False).returncode == 1
    said = diag("expect", contract, "--db", db, "--section", cwd=tmp_path).stdout
    assert "its torch 2.13 section" in said
    written = json.loads((tmp_path / "counts.json").read_text())
    (entry,) = written["rows"].values()
    assert entry["counts"]["graph_breaks"] == 0 and entry["torch"]["2.13"]["graph_breaks"] >= 1
    # the contract holds now (the break is still a regression against the older build: check's other half)
    held = diag("check", "--db", db, "--expect", contract, "--json", cwd=tmp_path, check=False)
    assert json.loads(held.stdout)["contract"]["moved"] == [], held.stdout


def test_a_file_that_is_no_contract_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"rows": 3}')
    db = tmp_path / "one.db"
    stored(str(db), run_record())
    done = diag("check", "--db", str(db), "--expect", str(bad), cwd=tmp_path, check=False)
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "is not a diag contract (write one with diag expect" in done.stderr


def _nightly(db: str, version: str, guards: list[str], fused: int) -> None:
    build = identity(version, version[:1] * 40, None)
    recompiles = [{"key": f"Recompile:{g}", "guard_property": g, "reason": g} for g in guards]
    counters = json.dumps({"stats": {"unique_graphs": 1}, "inductor": {"pattern_matcher_count": fused}})
    fields = {"recompile_count": len(guards), "graph_count": 1, "counters": counters}
    stored(db, run_record(build=build, uid=version, recompiles=recompiles, **fields))


def test_one_fewer_recompile_and_a_changed_inductor_counter_are_each_named(tmp_path):
    """Two nightlies stored as the probe stores them: tonight one recompile on ``size[1]`` fewer and
    inductor's pattern-matcher count 1 -> 0 (the silent fusion loss of pytorch/pytorch #190886)."""
    db, contract = str(tmp_path / "n.db"), str(tmp_path / "counts.json")
    _nightly(db, "2.12.0+cpu", ["size[1]", "size[1]", "item"], fused=1)
    assert cli("expect", contract, "--db", db, "--build", "2.12.0+cpu").exit_code == 0
    _nightly(db, "2.13.0+cpu", ["size[1]", "item"], fused=0)
    done = cli("check", "--db", db, "--expect", contract)
    assert done.exit_code == 1, done.output
    assert (
        "recompiles size[1]: expected 2, got 1 (fewer: an improvement, taken by rewriting the contract)" in done.output
    )
    assert "counter inductor.pattern_matcher_count: expected 1, got 0 (fewer);" in done.output  # a fusion lost
    assert "recompiles item" not in done.output and "3 count(s) moved in 1 of 1 row(s)" in done.output
