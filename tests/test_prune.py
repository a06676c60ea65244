"""diag prune over a long history: what it folds into counts, what it never loses, what it keeps."""

from __future__ import annotations

import datetime as dt
import json
import random
import sys
from pathlib import Path

from click.testing import CliRunner

from diag import store
from diag.build import identity
from diag.cli import cli
from diag.report.history import build_matrix

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import synthetic  # after sys.path names bench/

ROW = {"case": "append_last", "backend": "aot_eager", "fullgraph": 1, "dtype": "float32"}
OTHER = {**ROW, "case": "dynamic_slice"}
NIGHTS = 80
BROKEN = range(30, 33)  # nightlies 30-32 fail append_last, 33 fixes it
GONE = 70  # dynamic_slice is no longer run from this night on
CAPABILITIES = json.dumps({"timing": {"available": True, "detail": "stored whole until prune compacts it"}})


def _history() -> list[store.RunRecord]:
    """80 daily nightlies (one run of each row a night) and a release re-run every night (older than
    the nightlies: it comes first in version order, as a release leg's build does)."""
    rng = random.Random(0)
    release = identity("2.7.0", "r" * 40, None)
    found = []
    for day in range(NIGHTS):
        build = synthetic.nightly(day, rng, start=dt.date(2027, 1, 1))
        started = (dt.datetime(2027, 1, 1) + dt.timedelta(days=day)).isoformat()
        broken = day in BROKEN
        for name, row in (("a", ROW), ("o", OTHER)):
            if name == "o" and day >= GONE:
                continue
            status = "fullgraph_error" if broken and name == "a" else "pass"
            record = synthetic.record(
                build, f"{name}{day}", row, status, rng, synthetic.SLICE_ERROR if status != "pass" else None
            )
            record.run.update(started_at=started, capabilities=CAPABILITIES)
            found.append(record)
        record = synthetic.record(release, f"r{day}", ROW, "pass", rng)
        record.run.update(started_at=started, capabilities=CAPABILITIES)
        found.append(record)
    return found


def _transitions(db) -> set[tuple]:
    matrix = build_matrix(store.builds(db), store.report_runs(db), {})
    return {(t.row.case, t.last_before["version"], t.first_after["version"]) for t in matrix.transitions}


def _count(db) -> int:
    return (
        db.execute("SELECT count(*) FROM runs").fetchone()[0]
        + db.execute("SELECT coalesce(sum(runs), 0) FROM folded_runs").fetchone()[0]
    )


def test_prune_folds_old_nightlies_and_repeats_without_losing_a_run_or_a_transition(tmp_path):
    history = _history()
    db = store.open_db(tmp_path / "h.db")
    store.save_runs(db, history)
    before = _transitions(db)
    assert len(before) == 2  # the break at nightly 30 and its fix at 33

    result = store.prune(db, keep_builds=14, keep_runs=10, thin_after=60)
    # every run is either still there or counted
    assert _count(db) == len(history)
    # the release, re-run every night and older than the newest 14 builds, keeps the runs of its
    # newest two invocations (one run each here); the 78 before are counted by status
    release = store.find_build(db, "2.7.0")
    kept = [row[0] for row in db.execute("SELECT uid FROM runs WHERE torch_build_id = ?", [release["id"]])]
    assert sorted(kept) == ["r78", "r79"]
    folded = db.execute(
        "SELECT status, runs, first_started_at, last_started_at FROM folded_runs WHERE torch_build_id = ?",
        [release["id"]],
    ).fetchall()
    assert folded == [("pass", NIGHTS - 2, "2027-01-01T00:00:00", "2027-03-19T00:00:00")]
    # of the 20 nightlies past the newest 60, those that are no week's first and no transition's build
    nightlies = sorted((b for b in store.builds(db) if b["nightly_date"]), key=lambda b: b["nightly_date"])
    with_runs = {row[0] for row in db.execute("SELECT DISTINCT torch_build_id FROM runs")}
    kept_old = [int(b["nightly_date"][-2:]) - 1 for b in nightlies[: NIGHTS - 60] if b["id"] in with_runs]
    firsts = {
        day
        for day in range(NIGHTS - 60)
        if (dt.date(2027, 1, 1) + dt.timedelta(days=day)).isocalendar()[1]
        != (dt.date(2027, 1, 1) + dt.timedelta(days=day - 1)).isocalendar()[1]
        or day == 0
    }
    assert set(kept_old) == firsts | {0}, kept_old
    assert result["thinned"] == 2 * ((NIGHTS - 60) - len(set(kept_old)))  # both rows of each
    assert result["folded"] == (NIGHTS - 2) + result["thinned"]
    assert all(b["id"] in with_runs for b in nightlies[NIGHTS - 60 :])  # the newest 60 all stay
    # the transitions (and their builds) are exactly those before
    assert _transitions(db) == before


def test_a_transition_and_a_rows_last_build_keep_their_runs_past_the_window(tmp_path):
    db = store.open_db(tmp_path / "h.db")
    history = _history()
    store.save_runs(db, history)
    before = _transitions(db)
    store.prune(db, keep_builds=5, keep_runs=10, thin_after=5)
    nightly = {int(b["nightly_date"].replace("-", "")): b["id"] for b in store.builds(db) if b["nightly_date"]}
    with_runs = {row[0] for row in db.execute("SELECT DISTINCT torch_build_id FROM runs")}

    def has_runs(day: int) -> bool:
        date = dt.date(2027, 1, 1) + dt.timedelta(days=day)
        return nightly[int(f"{date:%Y%m%d}")] in with_runs

    # last good, first bad, last bad, first good again; dynamic_slice's last build
    assert all(has_runs(day) for day in (29, 30, 32, 33, GONE - 1))
    # between them, a build that is no week's first and changes nothing is folded
    assert not has_runs(34) and not has_runs(46)
    # and of a transition's build, only the row that changed there stays
    date = dt.date(2027, 1, 1) + dt.timedelta(days=30)
    cases = db.execute(
        'SELECT DISTINCT "case" FROM runs WHERE torch_build_id = ?', [nightly[int(f"{date:%Y%m%d}")]]
    ).fetchall()
    assert cases == [("append_last",)]
    assert _transitions(db) == before and _count(db) == len(history)
    # a second prune changes nothing: folded runs still count as their build's outcomes
    again = store.prune(db, keep_builds=5, keep_runs=10, thin_after=5)
    assert again["folded"] == 0 and again["thinned"] == 0


def test_a_folded_run_is_not_merged_again(tmp_path):
    db = store.open_db(tmp_path / "h.db")
    history = _history()
    store.save_runs(db, history)
    shard = store.open_db(tmp_path / "shard.db")
    store.save_runs(shard, history)
    shard.conn.close()
    store.prune(db, keep_builds=5, keep_runs=10, thin_after=5)
    runs = db.execute("SELECT count(*) FROM runs").fetchone()[0]
    done = CliRunner().invoke(cli, ["merge", str(tmp_path / "h.db"), str(tmp_path / "shard.db")])
    assert done.exit_code == 0, done.output
    assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == runs and _count(db) == len(history)
    # a newer run of a folded row of the release is a new run
    rng = random.Random(5)
    newer = synthetic.record(identity("2.7.0", "r" * 40, None), "r-new", ROW, "pass", rng)
    newer.run["started_at"] = "2027-06-01T00:00:00"
    assert store.merge(db, _single(tmp_path, newer))[0] == 1


def _single(tmp_path, record):
    shard = store.open_db(tmp_path / "one.db")
    store.save_runs(shard, [record])
    return shard


def test_prune_says_what_it_folded(tmp_path):
    db = store.open_db(tmp_path / "h.db")
    store.save_runs(db, _history())
    db.conn.close()
    done = CliRunner().invoke(cli, ["prune", "--db", str(tmp_path / "h.db"), "--thin-after", "5", "--keep-builds", "5"])
    assert done.exit_code == 0, done.output
    assert "folded" in done.output and "rows of old nightlies thinned" in done.output
    result = json.loads(CliRunner().invoke(cli, ["prune", "--db", str(tmp_path / "h.db"), "--json"]).stdout)
    assert result["folded"] == 0 and result["thinned"] == 0


def test_the_report_says_how_many_runs_were_folded(tmp_path):
    from diag import report

    db = store.open_db(tmp_path / "h.db")
    store.save_runs(db, _history())
    assert 'id="folded"' not in report.render(db, tmp_path / "site")["index.html"]
    store.prune(db, keep_builds=5, keep_runs=10, thin_after=5)
    page = report.render(db, tmp_path / "site")["index.html"]
    assert f'<span id="folded">{store.folded_total(db)} older runs folded' in page and store.folded_total(db) > 70


def test_a_build_re_run_every_night_keeps_full_detail_for_its_newest_two_invocations(tmp_path):
    rng = random.Random(2)
    release = identity("2.7.0", "r" * 40, None)
    history = []
    for night in range(6):
        for repeat in range(2):
            record = synthetic.record(release, f"r{night}-{repeat}", ROW, "pass", rng)
            record.run.update(
                started_at=f"2027-01-0{night + 1}T00:00:0{repeat}",
                capabilities=CAPABILITIES,
                invocation=f"night{night}",
            )
            history.append(record)
    db = store.open_db(tmp_path / "h.db")
    store.save_runs(db, history)
    store.prune(db, keep_builds=14, keep_runs=10)
    whole = {uid for (uid,) in db.execute("SELECT uid FROM runs WHERE capabilities IS NOT NULL")}
    assert whole == {"r5-0", "r5-1", "r4-0", "r4-1"}  # what check pools: the newest against the one before
    # of the 12 runs, the newest 10 stay (the older six compacted), the two before are counted
    assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 10
    assert db.execute("SELECT runs FROM folded_runs").fetchall() == [(2,)]


def test_the_retention_policy_on_plain_values():
    """policy.choose alone: full detail for a recent build's newest two invocations, a row's runs past
    keep_runs folded, an old build's third invocation folded, a thinned cell folded whole."""
    from diag.store import policy

    row = ("append_last",)
    runs = [
        (10, 2, "c", row),
        (9, 2, "b", row),
        (8, 2, "a", row),  # recent build: invocations c, b, a
        (7, 1, "y", row),
        (6, 1, "x", row),
        (5, 1, "w", row),  # old build
        (4, 3, "q", row),
    ]  # an old nightly's cell that thin_cells chose
    choice = policy.choose(runs, recent={2}, thin={(3, *row)}, keep_runs=10)
    assert choice.kept == {10, 9}
    assert choice.surplus == [5, 4]
    assert choice.thinned == {(3, *row)}
    capped = policy.choose(runs[:3], recent={2}, thin=set(), keep_runs=1)
    assert (capped.kept, capped.surplus) == ({10}, [9, 8])


def test_prune_never_changes_a_verdict_check_or_the_report_gives(tmp_path):
    """The newest build's cell holds a SIGSEGV and a later pass of the same row: the crash decides the
    cell (a failure among repeats is never outvoted). --keep-runs 1 folds a cell's older runs, but never
    the one that decides it: check reports the same regression after prune, the report the same cells."""
    rng = random.Random(1)
    found = []
    for day, statuses in ((0, ("pass", "pass")), (1, ("pass", "pass")), (2, ("crash", "pass", "pass"))):
        build = synthetic.nightly(day, rng, start=dt.date(2027, 1, 1))
        for index, status in enumerate(statuses):
            record = synthetic.record(build, f"n{day}-{index}", ROW, status, rng)
            started = dt.datetime(2027, 1, 1) + dt.timedelta(days=day, minutes=index)
            record.run.update(started_at=started.isoformat(), capabilities=CAPABILITIES, invocation=f"i{day}-{index}")
            found.append(record)
    path = tmp_path / "h.db"
    store.save_runs(store.open_db(path), found)

    def said() -> tuple:
        checked = CliRunner().invoke(cli, ["check", "--db", str(path), "--json"])
        matrix = build_matrix(store.builds(store.open_db(path)), store.report_runs(store.open_db(path)), {})
        cells = sorted((row, build, cell.run["uid"], cell.state, cell.worst) for row, build, cell in matrix.cells())
        return checked.exit_code, json.loads(checked.stdout)["regressions"], cells

    before = said()
    assert [cell[3] for cell in before[2]] == ["works", "works", "flaky"]
    assert before[0] == 1 and any(r["kind"] == "status" and "crash" in r["message"] for r in before[1]), before
    pruned = CliRunner().invoke(
        cli, ["prune", "--db", str(path), "--keep-builds", "1", "--keep-runs", "1", "--thin-after", "1"]
    )
    assert pruned.exit_code == 0, pruned.output
    assert store.open_db(path).execute("SELECT coalesce(sum(runs), 0) FROM folded_runs").fetchone()[0] > 0
    assert said() == before
