"""diag/build.py: the one parser of torch version strings, specs and wheel names, and the order of builds.

The versions come from real builds: the build records the probe wrote on every torch minor from 2.0 to
2.15 (tests/fixtures/versions), nightlies as the PyTorch index names them, and a source build.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from diag import build, envs
from diag.build import BuildError, Spec, Version, WheelName

VERSIONS = Path(__file__).parent / "fixtures" / "versions"


def _recorded_versions() -> list[str]:
    """torch.__version__ as the probe recorded it on each provisioned build."""
    found = set()
    for log in VERSIONS.glob("*/*/diagnose.jsonl"):
        for line in log.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record.get("kind") == "build":
                found.add(record["torch_version"])
    return sorted(found)


def test_every_recorded_minor_parses_with_its_variant():
    recorded = _recorded_versions()
    assert {Version.parse(v).series for v in recorded} == {(2, minor) for minor in range(16)}
    for text in recorded:
        version = Version.parse(text)
        assert version.base == text.split("+")[0] and not version.is_nightly and version.nightly_date is None
        assert version.variant == text.split("+")[1]  # cpu, cu117 ... cu132
        assert Spec.parse(version.base).admits(text)


def test_recorded_minors_sort_as_released_whatever_order_they_come_in():
    recorded = _recorded_versions()
    shuffled = recorded[:]
    random.Random(3).shuffle(shuffled)
    ordered = sorted(shuffled, key=build.version_key)
    assert [Version.parse(v).series[1] for v in ordered] == list(range(16))  # 2.10 after 2.9, not after 2.1


@pytest.mark.parametrize(
    "text, date, variant, series",
    [
        ("2.1.0.dev20230621+cu118", "2023-06-21", "cu118", (2, 1)),
        ("2.1.0.dev20230801+cu121", "2023-08-01", "cu121", (2, 1)),
        ("2.16.0.dev20261130+cpu", "2026-11-30", "cpu", (2, 16)),
        ("2.6.0.dev20241112+rocm6.2", "2024-11-12", "rocm6.2", (2, 6)),
        ("2.1.0a0+git1234abc", None, None, (2, 1)),  # a source build: the local label is a commit, not a variant
        ("2.13.0", None, None, (2, 13)),
    ],
)
def test_version_fields(text, date, variant, series):
    version = Version.parse(text)
    assert (version.nightly_date, version.variant, version.series) == (date, variant, series)


def test_nightlies_come_before_their_release_and_after_the_previous_one():
    texts = [
        "2.2.0",
        "2.1.0",
        "2.1.0.dev20230621+cu118",
        "2.1.0rc1",
        "2.0.1+cu117",
        "2.1.0.dev20230601",
        "2.10.0+cpu",
        "2.1.0.post1",
        "2.2.0.dev20231101+cpu",
    ]
    assert sorted(texts, key=build.version_key) == [
        "2.0.1+cu117",
        "2.1.0.dev20230601",
        "2.1.0.dev20230621+cu118",
        "2.1.0rc1",
        "2.1.0",
        "2.1.0.post1",
        "2.2.0.dev20231101+cpu",
        "2.2.0",
        "2.10.0+cpu",
    ]


def test_stored_builds_order_by_version_then_date_then_id_and_unknown_first():
    stored = [
        {"id": 1, "version": "2.2.0"},
        {"id": 2, "version": "unknown"},
        {"id": 3, "version": "2.1.0.dev20230621+cpu", "nightly_date": "2023-06-21"},
        {"id": 4, "version": "2.2.0"},
        {"id": 5, "version": None},
    ]
    assert [b["id"] for b in sorted(stored, key=build.order)] == [2, 5, 3, 1, 4]


@pytest.mark.parametrize(
    "spec, kind",
    [
        ("current", "current"),
        ("2.13.0", "release"),
        ("2.13", "release"),
        ("2.1.0.dev20230621", "nightly_date"),
        ("2.1.0.dev", "nightly_prefix"),
        ("nightly", "nightly"),
        ("./envs/x/bin/python", "python"),
        ("python3.11", "python"),
        ("/wheels/torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl", "wheel"),
        (
            "https://download.pytorch.org/whl/nightly/cpu/torch-2.1.0.dev20230621%2Bcpu-cp311-cp311-linux_x86_64.whl",
            "wheel",
        ),
    ],
)
def test_spec_kinds(spec, kind):
    assert Spec.parse(spec).kind == kind


@pytest.mark.parametrize(
    "spec",
    ["2.x", "latest", "2.1.0.dev2023", "", "2.1.0+cpu", "2.1.dev20230101", "file://x.txt", "https://example.org/torch"],
)
def test_malformed_specs_name_every_form_a_spec_can_take(spec):
    with pytest.raises(envs.EnvError, match=r"malformed torch spec .*a release \(2\.13\.0\).*a path to a python"):
        envs.parse_spec(spec)


@pytest.mark.parametrize(
    "spec, installed, ok",
    [
        ("2.13.0", "2.13.0+cpu", True),
        ("2.13.0", "2.13.1", False),
        ("2.13", "2.13.0", True),
        ("2.1.0.dev20230621", "2.1.0.dev20230621+cu118", True),
        # pip falling back to a release when the dated nightly is missing must not pass.
        ("2.1.0.dev20230621", "2.1.0", False),
        ("2.1.0.dev", "2.1.0.dev20230701+cpu", True),
        ("2.1.0.dev", "2.1.0", False),
        ("nightly", "2.16.0.dev20261130", True),
        ("nightly", "2.14.1", False),
        ("2.13.0", "unknown", False),
    ],
)
def test_installed_version_must_match_the_request(spec, installed, ok):
    assert Spec.parse(spec).admits(installed) is ok


def test_wheel_names_from_the_index_and_from_disk():
    url = "https://download.pytorch.org/whl/nightly/cu118/torch-2.1.0.dev20230621%2Bcu118-cp311-cp311-linux_x86_64.whl"
    name = WheelName.parse(url)
    assert (name.version.text, name.version.variant, name.python) == ("2.1.0.dev20230621+cu118", "cu118", "cp311")
    assert name.tags() == {"cp311-cp311-linux_x86_64"}
    assert Spec.parse(url).version == name.version
    with pytest.raises(BuildError, match="not a wheel file name"):
        WheelName.parse("torch-2.1.0.tar.gz")


def test_identity_takes_the_variant_from_cuda_and_the_date_from_the_version():
    nightly = build.identity("2.1.0.dev20230621+cu118", "abc123", "11.8")
    assert (nightly["variant"], nightly["nightly_date"], nightly["build_key"]) == (
        "cu118",
        "2023-06-21",
        "abc123|cu118",
    )
    unknown = build.identity("unknown", "Unknown", None)
    assert (unknown["git_version"], unknown["nightly_date"], unknown["build_key"]) == (None, None, "unknown|cpu")


@pytest.mark.parametrize(
    "value, wanted",
    [("3.10", (3, 10)), ("3.10.13", (3, 10)), ("python3.12", (3, 12)), ("/usr/bin/python3", None), ("2.7", None)],
)
def test_python_versions(value, wanted):
    assert build.python_request(value) == wanted
