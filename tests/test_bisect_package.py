"""``diag bisect --package``: one package other than torch and transformers moved, over real releases
from the package index, each installed over one base environment that holds everything else."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, diag
from factories import package_bisect

from diag import store

CASE = REPO / "tests" / "cases" / "cache_by_label.py"


def _sizes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def test_a_packaging_release_that_changed_the_cache_a_model_took_is_found(tmp_path, torch_envs_home):
    """torch 2.13.0 fixed; the case's model file reads its fork's label with packaging, which parses it
    up to 21.3 and refuses it from 22.0 (LegacyVersion removed), so the model takes a sliced cache and
    fullgraph fails. Three real releases (21.2, 21.3, 22.0), one run each (--confirm 0): the
    confirmed ends are test_nightly_path's."""
    db, home = tmp_path / "p.db", {"DIAG_HOME": str(torch_envs_home)}
    bisecting = package_bisect(str(CASE), ["--package", "packaging=21.2..22.0"], db)
    done = diag(*bisecting, "--json", cwd=tmp_path, timeout=1800, env_extra=home)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["moved"] == "packaging" and summary["torch"] == "2.13.0"
    assert (summary["good_status"], summary["bad_status"]) == ("pass", "fullgraph_error")
    assert summary["candidates"] == 3 and list(summary["tested"]) == ["21.3"]
    assert (summary["last_good"]["packaging"], summary["first_bad"]["packaging"]) == ("21.3", "22.0")
    assert summary["compare_url"] == "https://pypi.org/project/packaging/22.0/"
    assert summary["reproduce"].startswith("diag run --torch 2.13.0 --with packaging==22.0 ")
    # one base less packaging, built once; each release an overlay of it, a few hundred KB
    made = sorted(p.name for p in (torch_envs_home / "envs").iterdir() if "without-packaging" in p.name)
    base, *overlays = made
    assert [name.removeprefix(base) for name in overlays] == ["+packaging-21.2", "+packaging-21.3", "+packaging-22.0"]
    assert all(_sizes(torch_envs_home / "envs" / name) < 5 * 2**20 for name in overlays)
    listed = diag("env", "list", cwd=tmp_path, env_extra=home).stdout
    assert f"(packaging==22.0 over {base})" in listed and "(a base without packaging)" in listed, listed
    python = torch_envs_home / "envs" / overlays[-1] / "bin" / "python"
    where = "import packaging, torch; print(packaging.__version__, packaging.__file__, torch.__file__)"
    version, packaging_file, torch_file = subprocess.run(
        [str(python), "-c", where], capture_output=True, text=True, check=True
    ).stdout.split()
    assert version == "22.0" and packaging_file.startswith(str(torch_envs_home / "envs" / overlays[-1]))
    assert torch_file.startswith(str(torch_envs_home / "envs" / base) + "/")
    # the runs' stored environments hold the release each ran, and env-diff names the package that moved
    stored = store.open_db(db)
    runs = {r["id"]: r for r in stored.query("SELECT id, status FROM runs")}
    assert len(runs) == 3 and {r["status"] for r in runs.values()} == {"pass", "fullgraph_error"}
    good_id, bad_id = summary["last_good"]["run"], summary["first_bad"]["run"]
    moved = json.loads(diag("env-diff", str(good_id), str(bad_id), "--db", str(db), "--json", cwd=tmp_path).stdout)
    assert moved["packages"]["packaging"] == ["21.3", "22.0"], moved["packages"]
    assert "torch" not in moved["packages"] and "transformers" not in moved["packages"]
    # asked again, nothing is installed or run
    again = diag(*bisecting, cwd=tmp_path, env_extra=home)
    assert again.stderr.count("reusing 1 stored run") == 3 and "packaging==" not in again.stderr, again.stderr
    assert (
        "changes:   packaging 21.3..22.0   (its release page: https://pypi.org/project/packaging/22.0/)" in again.stdout
    )


@pytest.mark.parametrize("name", ["torch", "pip", "Torch"])
def test_the_packages_an_overlay_is_made_with_are_refused_in_one_line(name, tmp_path):
    done = diag(
        "bisect", "--case", "append_last", "--package", f"{name}=1.0..2.0", "--db", str(tmp_path / "x.db"),
        cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode != 0 and f"--package {name.lower()}: " in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.db").exists()
