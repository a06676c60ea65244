"""Bisect: the pure search over long synthetic histories. The real search over real wheels, and a second
bisect that reuses every run, is the nightly path's (tests/test_nightly_path.py)."""

from __future__ import annotations

import pytest

from diag import bisect


def _history(length: int, first_bad: int, broken: frozenset = frozenset()):
    builds = [f"2.1.0.dev2023{index:04d}" for index in range(length)]
    calls = []

    def is_bad(spec):
        calls.append(spec)
        index = builds.index(spec)
        return None if index in broken else index >= first_bad

    return builds, is_bad, calls


@pytest.mark.parametrize("length, first_bad", [(2, 1), (3, 1), (3, 2), (100, 1), (100, 37), (100, 99), (365, 200)])
def test_search_finds_the_first_bad_build(length, first_bad):
    builds, is_bad, calls = _history(length, first_bad)
    result = bisect.search(builds, is_bad)
    assert (result.last_good, result.first_bad) == (builds[first_bad - 1], builds[first_bad])
    assert len(calls) <= max(0, (length - 2).bit_length())


def test_builds_that_fail_to_install_are_skipped_and_reported():
    builds, is_bad, calls = _history(50, 20, broken=frozenset({24, 25, 19}))
    result = bisect.search(builds, is_bad)
    # 19 cannot be tested, so the boundary is known only to lie between 18 and 20.
    assert (result.last_good, result.first_bad) == (builds[18], builds[20])
    assert builds[19] in result.skipped
    assert all(result.tested[s] is None for s in result.skipped)


def test_probe_reuses_runs_it_already_has():
    runs = {"a": {"status": "pass"}, "b": {"status": "fullgraph_error"}}
    asked = []

    def run_build(spec):
        asked.append(spec)
        return runs.get(spec)

    probe = bisect.BuildTester(run_build, good_status="pass")
    assert probe.is_bad("b") is True and probe.is_bad("a") is False and probe.is_bad("missing") is None
    assert asked == ["b", "a", "missing"]


def test_a_fallback_the_case_notes_is_a_difference_even_where_the_status_holds():
    """transformers 4.54.0 refuses hf:ctrl's static cache; the case then decodes with generate's own cache
    and passes, as 4.53.3 passes with the static cache: the bisect must still tell the two apart."""
    note = "this transformers' generate fails on ctrl with a static cache, eagerly (ValueError: ...)"
    runs = {"4.53.3": {"status": "pass", "case_note": None}, "4.54.0": {"status": "pass", "case_note": note}}
    probe = bisect.BuildTester(runs.get, good_status=bisect.outcome(runs["4.53.3"]))
    assert probe.is_bad("4.54.0") is True and probe.is_bad("4.53.3") is False
    assert bisect.outcome(runs["4.54.0"]) == "pass (the case noted a fallback)"


def test_candidates_between_good_and_bad_in_version_order():
    listed = ["2.2.0.dev20231201", "2.1.0", "2.1.0.dev20230701", "2.1.0.dev20230601", "2.2.0"]
    assert bisect.between(listed, "2.1.0.dev20230601", "2.2.0.dev20231201") == [
        "2.1.0.dev20230601",
        "2.1.0.dev20230701",
        "2.1.0",
        "2.2.0.dev20231201",
    ]


def test_versions_from_a_local_simple_index(tmp_path):
    torch_dir = tmp_path / "simple" / "torch"
    torch_dir.mkdir(parents=True)
    (torch_dir / "index.html").write_text(
        '<a href="../../f/torch-2.1.0.dev20230601%2Bcpu-cp311-cp311-linux_x86_64.whl#sha256=1">x</a>'
        '<a href="torch-2.1.0.dev20230602+cpu-cp311-cp311-linux_x86_64.whl">y</a>'
        '<a href="torchvision-0.16.0.dev20230601-cp311-linux_x86_64.whl">z</a>'
    )
    assert bisect.index_versions((tmp_path / "simple").as_uri()) == ["2.1.0.dev20230601", "2.1.0.dev20230602"]
