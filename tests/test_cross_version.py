"""End to end across two real torch builds that diag provisions itself (2.13.0 and 2.14.1 are on
this machine's local package index, so no multi-GB download is needed)."""

from __future__ import annotations

import json

import pytest
from conftest import diag, show

from diag import store


@pytest.mark.slow
def test_two_provisioned_builds_land_in_one_db(tmp_path, torch_envs_home, monkeypatch):
    monkeypatch.setenv("DIAG_HOME", str(torch_envs_home))
    db = tmp_path / "cross.db"
    done = diag(
        "run",
        "--case",
        "append_last",
        "--case",
        "dynamic_slice",
        "--torch",
        "2.13.0",
        "--torch",
        "2.14.1",
        "--backend",
        "eager",
        "--fullgraph",
        "--no-timing",
        "--new-tokens",
        "4",
        "--jobs",
        "2",
        "--db",
        str(db),
        "--json",
        cwd=tmp_path,
        timeout=3000,
    )
    runs = json.loads(done.stdout)
    assert sorted((r["case"], r["torch_version"].split("+")[0]) for r in runs) == [
        ("append_last", "2.13.0"),
        ("append_last", "2.14.1"),
        ("dynamic_slice", "2.13.0"),
        ("dynamic_slice", "2.14.1"),
    ]
    builds = {b["version"].split("+")[0]: b for b in store.builds(store.open_db(db))}
    assert set(builds) == {"2.13.0", "2.14.1"}
    assert builds["2.13.0"]["git_version"] != builds["2.14.1"]["git_version"]
    assert all(len(b["git_version"]) == 40 for b in builds.values())
    for run in runs:
        full = show(db, run["id"], tmp_path)
        assert full["build_version"] == full["torch_version"]
        expected = "pass" if run["case"] == "append_last" else "fullgraph_error"
        assert run["status"] == expected, (run["torch_version"], run["case"], full["error_message"])

    # the provisioned home is shared with the other tests that provision (tests/conftest.py), which may
    # have added environments of their own (2.13.0 with another transformers)
    listed = json.loads(diag("env", "list", "--json", cwd=tmp_path).stdout)
    assert {row["torch_version"].split("+")[0] for row in listed} >= {"2.13.0", "2.14.1"}
    # whole environments hold torch; a package bisect's overlays (test_bisect_package) only a release,
    # over a base that is listed too
    whole = {row["name"]: row for row in listed if not row["over"]}
    assert all(row["size_mb"] > 100 for row in whole.values())
    assert all(row["over"] in whole and row["moved"] for row in listed if row["over"])
    # A second use finds the stamp and reuses the environment as it is: one of those listed, none added.
    again = json.loads(diag("env", "add", "2.13.0", "--json", cwd=tmp_path).stdout)
    assert again["path"] in {row["path"] for row in listed if row["torch_version"].startswith("2.13.0")}
    assert json.loads(diag("env", "list", "--json", cwd=tmp_path).stdout) == listed
