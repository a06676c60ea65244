"""Each run's environment, stored once: what the probe lists, how the store keeps and merges it,
`diag env-diff`, and `check` naming a package that moved beside torch and transformers."""

from __future__ import annotations

import copy
import json
import sys
from importlib import metadata
from pathlib import Path

from conftest import cli, diag_here

from diag import row as rows
from diag import store
from diag.probe import session

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import synthetic  # after sys.path names bench/

PACKAGES = {
    "torch": "2.13.0",
    "transformers": "4.57.0",
    "depyf": "0.18.0",
    "sympy": "1.13.1",
    "nvidia-nccl-cu12": "2.21",
}


def test_the_probe_lists_every_installed_distribution_with_its_version():
    found = session.installed()
    assert found["torch"] == metadata.version("torch") and found["click"] == metadata.version("click")
    assert found["sqlite-utils"] == metadata.version("sqlite-utils")  # names normalised as PEP 503 does


def test_the_driver_version_is_read_from_the_kernel_module_line(tmp_path):
    proprietary = tmp_path / "proprietary"
    proprietary.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n")
    open_module = tmp_path / "open"
    open_module.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build\n")
    assert session.driver_version(str(proprietary)) == "535.104.05"
    assert session.driver_version(str(open_module)) == "550.54.14"
    assert session.driver_version(str(tmp_path / "none")) is None


def _runs(moved: dict[str, str], status: str = "graph_break"):
    """Two runs of one row on one build, each its own invocation; the second's environment with
    ``moved`` packages, and ``status``."""
    rng = synthetic.random.Random(0)
    build = synthetic.nightly(0, rng)
    row = synthetic.configs()[1]  # no fullgraph
    made = []
    for index, packages in enumerate((PACKAGES, {**PACKAGES, **moved})):
        record = synthetic.record(build, f"env-{index}", row, status if index else "graph_break", rng)
        record.run["invocation"] = f"invocation-{index}"
        record.run["started_at"] = f"2026-01-0{index + 1}T00:00:00"
        record.environment = store.environment_row("3.11.7", None, None, packages)
        made.append(record)
    return made


def test_an_environment_is_stored_once_and_carried_by_a_merge(tmp_path):
    shard_path = tmp_path / "shard.db"
    shard = store.open_db(shard_path)
    records = _runs({})
    again = copy.deepcopy(records[0])
    again.run["uid"] = "env-again"
    store.save_runs(shard, records + [again])
    assert shard["environments"].count == 1
    digests = {row[0] for row in shard.execute("SELECT environment FROM runs")}
    assert len(digests) == 1 and None not in digests
    target = store.open_db(tmp_path / "target.db")
    store.merge(target, shard)
    [held] = store.environments(target, digests).values()
    assert held["packages"] == PACKAGES and held["python"] == "3.11.7"


def test_env_diff_names_exactly_the_package_that_moved(tmp_path):
    db = tmp_path / "h.db"
    store.save_runs(store.open_db(db), _runs({"sympy": "1.13.3"}))
    found = json.loads(cli("env-diff", "1", "2", "--db", str(db), "--json").output)
    assert found["packages"] == {"sympy": ["1.13.1", "1.13.3"]} and "python" not in found
    text = cli("env-diff", "1", "2", "--db", str(db)).output
    assert "packages: 1 of 5 differ" in text and "  sympy 1.13.1 -> 1.13.3" in text
    done = diag_here("env-diff", "1", "9", "--db", str(db), cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.strip() == "Error: no run #9 in the database"


def test_check_names_the_package_beside_torch_that_moved_as_the_owner(tmp_path):
    """depyf moved between two invocations on one torch build, and the row stopped compiling: its
    cause is depyf's, not torch's or the case's. torch's own CUDA libraries moving are torch's."""
    db = tmp_path / "h.db"
    moved = {"depyf": "0.19.0", "nvidia-nccl-cu12": "2.23"}
    store.save_runs(store.open_db(db), _runs(moved, "compile_error"))
    found = json.loads(cli("check", "--db", str(db), "--json").output)
    [cause] = found["causes"]
    assert (cause["owner"], cause["tracker"]) == ("depyf", "thuml/depyf")
    assert cause["moved_beside"] == ["depyf 0.18.0 -> 0.19.0"]
    assert "moved beside it: depyf 0.18.0 -> 0.19.0" in cli("check", "--db", str(db)).output
    # the alert's bisect moves what moved: depyf's releases with torch held, not torch onto itself
    alerts = tmp_path / "alerts.json"
    cli("check", "--db", str(db), "--alerts", str(alerts))
    [alert] = json.loads(alerts.read_text())
    torch = store.builds(store.open_db(db))[0]["version"].split("+")[0]
    [line] = [line for line in alert["body"].splitlines() if "Bisect" in line]
    assert line.startswith("Bisect: `diag bisect --case append_last ") and "--good" not in line, line
    assert line.endswith(f" --package depyf=0.18.0..0.19.0 --torch {torch}`"), line
    assert "/compare/" not in alert["body"]  # one build: no range of commits


def test_bisect_moves_any_one_package_with_torch_held(tmp_path):
    """depyf's releases listed by an index on 127.0.0.1 (the package index is what stands in here);
    each release's run is stored, with its environment, so that one run of each decides and nothing
    is installed: the first release on which the row stops compiling is found, named by the package."""
    import nightly_index

    rng = synthetic.random.Random(1)
    build = synthetic.build_identity("2.13.0", f"{rng.getrandbits(160):040x}", None)
    row = synthetic.configs()[1]
    records = []
    for index, (version, status) in enumerate(
        (("0.17.0", "graph_break"), ("0.18.0", "graph_break"), ("0.19.0", "compile_error"))
    ):
        record = synthetic.record(
            build, f"depyf-{version}", row, status, rng, ("TypeError", "no") if index == 2 else None
        )
        record.environment = store.environment_row("3.11.7", None, None, {**PACKAGES, "depyf": version})
        records.append(record)
    db = tmp_path / "h.db"
    store.save_runs(store.open_db(db), records)
    listing = tmp_path / "www" / "simple" / "depyf"
    listing.mkdir(parents=True)
    links = "".join(
        f'<a href="depyf-{v}-py3-none-any.whl">depyf-{v}-py3-none-any.whl</a>\n' for v in ("0.17.0", "0.18.0", "0.19.0")
    )
    (listing / "index.html").write_text(f"<html><body>{links}</body></html>")
    with nightly_index.Server(tmp_path / "www") as server:
        args = ["bisect", *rows.flags(rows.of(records[0].run)), "--package"]
        args += ["depyf=0.17.0..0.19.0", "--torch", "2.13.0", "--confirm", "0", "--index-url", f"{server.url}/simple"]
        done = cli(*args, "--db", str(db), "--json")
    summary = json.loads(done.stdout)
    assert summary["moved"] == "depyf" and summary["first_bad"]["depyf"] == "0.19.0"
    assert summary["last_good"]["depyf"] == "0.18.0" and summary["commit_range"] == "depyf 0.18.0..0.19.0"
    assert summary["reproduce"].startswith("diag run --torch 2.13.0 --with depyf==0.19.0 --case append_last")
    # stored, as check --alerts links it beside a cause of the row
    stored = store.bisects(store.open_db(db))[rows.label(rows.of(records[0].run))]
    assert (stored["id"], stored["signal"], stored["moved"]) == (summary["stored_as"], "status", "depyf")
    assert (stored["last_good"], stored["first_bad"]) == ("0.18.0", "0.19.0")


def test_an_alert_links_the_bisect_stored_for_its_row(tmp_path):
    db = tmp_path / "h.db"
    records = _runs({"depyf": "0.19.0"}, "compile_error")
    store.save_runs(store.open_db(db), records)
    alerts = tmp_path / "alerts.json"
    cli("check", "--db", str(db), "--alerts", str(alerts))
    assert "Bisect: `diag bisect" in json.loads(alerts.read_text())[0]["body"]
    summary = {
        "row": rows.label(rows.of(records[0].run)),
        "signal": "status",
        "moved": "depyf",
        "last_good": {"depyf": "0.18.0"},
        "first_bad": {"depyf": "0.19.0"},
        "commit_range": "depyf 0.18.0..0.19.0",
        "reproduce": "diag run --torch 2.13.0 --with depyf==0.19.0",
    }
    number = store.save_bisect(store.open_db(db), summary["row"], summary)
    cli("check", "--db", str(db), "--alerts", str(alerts))
    body = json.loads(alerts.read_text())[0]["body"]
    assert f"Bisected (#{number}, on status): first bad 0.19.0 after 0.18.0, depyf 0.18.0..0.19.0" in body
    assert "- moved beside it: depyf 0.18.0 -> 0.19.0" in body
