"""Torch environment specs and installer arguments (pure), and provisioning failures (real pip, real venvs).

The PyTorch nightly index cannot be reached from the test machines, so nightly
specs are checked by the installer arguments they produce, not by installing.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import diag

from diag import envs

NIGHTLY_CPU = "https://download.pytorch.org/whl/nightly/cpu"


def _pip(python="py"):
    return [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--no-compile"]


@pytest.mark.parametrize("spec, expected", [("2.13.0", _pip() + ["torch==2.13.0"]), ("2.4", _pip() + ["torch==2.4"])])
def test_release_install_command(spec, expected):
    assert envs.torch_install_command(envs.Request(envs.parse_spec(spec)), "py") == expected
    with_links = envs.torch_install_command(
        envs.Request(envs.parse_spec(spec), find_links=("/w",), index_url="https://x/simple"), "py"
    )
    assert with_links[-5:] == ["--index-url", "https://x/simple", "--find-links", "/w", f"torch=={spec}"]


def test_a_found_nightly_wheel_is_installed_as_a_file_with_the_nightly_index_for_its_dependencies(tmp_path):
    request = envs.Request(
        envs.parse_spec("2.1.0.dev20230621"), variant="cu124", extra_index_urls=("https://mirror.example/simple",)
    )
    command = envs.wheel_install_command(request, "py", tmp_path / "torch.whl")
    assert command == _pip() + [
        "--extra-index-url",
        "https://download.pytorch.org/whl/nightly/cu124",
        "--extra-index-url",
        "https://mirror.example/simple",
        str(tmp_path / "torch.whl"),
    ]
    custom = envs.Request(envs.parse_spec("2.1.0.dev20230621"), index_url="https://my.index/nightly")
    assert custom.index == "https://my.index/nightly"
    assert NIGHTLY_CPU not in envs.wheel_install_command(custom, "py", tmp_path / "torch.whl")


def test_extras_step_pins_torch_and_adds_transformers_only_when_missing():
    plain = envs.extras_install_command(envs.Request(envs.parse_spec("2.13.0")), "py", "pin.txt")
    assert plain == _pip() + ["-c", "pin.txt", "transformers"]
    pinned = envs.extras_install_command(
        envs.Request(envs.parse_spec("2.4.1"), extras=("transformers==4.44.2", "depyf")), "py", "pin.txt"
    )
    assert pinned[-2:] == ["transformers==4.44.2", "depyf"]
    assert pinned.count("transformers") == 0


def test_a_package_bisects_base_leaves_the_moved_package_out_and_is_an_environment_of_its_own():
    plain = envs.Request(envs.parse_spec("2.13.0"), extras=("depyf",))
    base = envs.Request(envs.parse_spec("2.13.0"), extras=("depyf",), without="Transformers")
    assert envs.extras_install_command(base, "py", "pin.txt") == _pip() + ["-c", "pin.txt", "depyf"]
    assert (
        envs.extras_install_command(envs.Request(envs.parse_spec("2.13.0"), without="transformers"), "py", "p") is None
    )
    assert envs.env_key(base) != envs.env_key(plain) and "-without-transformers-" in envs.env_key(base)
    spelled = envs.Request(envs.parse_spec("2.13.0"), extras=("depyf",), without="transformers")
    assert envs.env_key(spelled) == envs.env_key(base)  # one base however the name is written
    assert envs.extras_install_command(envs.Request(envs.parse_spec("2.13.0"), without="packaging"), "py", "p")[-1] == (
        "transformers"
    )


def test_uv_installer_arguments():
    request = envs.Request(envs.parse_spec("2.13.0"), installer="uv")
    assert envs.torch_install_command(request, "/e/bin/python") == [
        "uv",
        "pip",
        "install",
        "--python",
        "/e/bin/python",
        "torch==2.13.0",
    ]


def test_env_key_depends_on_everything_that_changes_the_environment():
    base = envs.Request(envs.parse_spec("2.13.0"))
    keys = {
        envs.env_key(r)
        for r in (
            base,
            envs.Request(envs.parse_spec("2.13.0"), extras=("transformers==4.44.2",)),
            envs.Request(envs.parse_spec("2.13.0"), index_url="https://x"),
            envs.Request(envs.parse_spec("2.13.0"), installer="uv"),
            envs.Request(envs.parse_spec("2.14.1")),
        )
    }
    assert len(keys) == 5
    assert envs.env_key(base) == envs.env_key(envs.Request(envs.parse_spec("2.13.0")))


def test_interpreter_without_torch_is_one_line_error(tmp_path):
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    done = diag(
        "run",
        "--case",
        "append_last",
        "--torch",
        str(venv / "bin" / "python"),
        "--db",
        str(tmp_path / "x.db"),
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot import torch" in lines[0] and str(venv) in lines[0]


@pytest.mark.slow
def test_a_version_that_does_not_exist_leaves_no_half_built_environment(tmp_path):
    done = diag("env", "add", "2.0.99", cwd=tmp_path, check=False)
    assert done.returncode != 0
    assert "torch spec '2.0.99'" in done.stderr and "Traceback" not in done.stderr
    home = tmp_path / "diag-home" / "envs"
    assert not home.exists() or list(home.iterdir()) == []


@pytest.mark.slow
def test_unreachable_index_is_one_line_error_and_other_envs_still_run(tmp_path):
    db = tmp_path / "m.db"
    done = diag(
        "run",
        "--case",
        "append_last",
        "--fullgraph",
        "--backend",
        "eager",
        "--no-timing",
        "--new-tokens",
        "3",
        "--torch",
        "2.1.0.dev20230621",
        "--index-url",
        "http://127.0.0.1:9/simple",
        "--torch",
        "current",
        "--db",
        str(db),
        "--json",
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "2.1.0.dev20230621" in errors[0]
    import json

    assert [r["case"] for r in json.loads(done.stdout)] == ["append_last"]
    home = tmp_path / "diag-home" / "envs"
    assert not home.exists() or [p for p in home.iterdir()] == []


def test_env_rm_unknown_name(tmp_path):
    done = diag("env", "rm", "nope", cwd=tmp_path, check=False)
    assert done.returncode != 0 and "no provisioned environment named 'nope'" in done.stderr


def _fake_python(path, version):
    """An executable that answers the version query like a python of ``version`` (x.y.z)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {version.replace('.', ' ')}\n")
    path.chmod(0o755)
    return path


def test_python_version_is_found_on_path_then_pyenv_then_uv(tmp_path, monkeypatch):
    bin_dir, pyenv_root = tmp_path / "bin", tmp_path / "pyenv"
    monkeypatch.setenv("PYENV_ROOT", str(pyenv_root))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    # a pyenv shim on PATH that is not the asked version is passed over
    _fake_python(bin_dir / "python3.77", "3.11.7")
    monkeypatch.setenv("PATH", str(bin_dir))
    installed = _fake_python(pyenv_root / "versions" / "3.77.2" / "bin" / "python", "3.77.2")
    assert envs.find_python("3.77") == str(installed)
    assert envs.find_python("python3.77") == str(installed)
    on_path = _fake_python(bin_dir / "python3.78", "3.78.0")
    assert envs.find_python("3.78") == str(on_path)
    with pytest.raises(envs.EnvError) as error:
        envs.find_python("3.79")
    message = str(error.value)
    assert "no Python 3.79 found" in message and "PATH" in message and "pyenv" in message and "uv" in message
    assert "\n" not in message


def test_python_path_and_bad_values(tmp_path):
    assert envs.find_python(None) == sys.executable
    assert envs.find_python(sys.executable) == sys.executable
    with pytest.raises(envs.EnvError, match="not an executable file"):
        envs.find_python(str(tmp_path / "nope"))


@pytest.mark.parametrize(
    "spec, python, ok",
    [
        ("2.0.1", (3, 10, 13), True),
        ("2.0.1", (3, 11, 7), False),
        ("2.1.2", (3, 11, 7), True),
        ("2.3.1", (3, 12, 1), False),
        ("2.4.1", (3, 12, 1), True),
        ("2.5.1", (3, 13, 0), False),
        ("2.1.0.dev20230621", (3, 11, 7), True),
        ("2.0.0.dev20230301", (3, 11, 7), False),
        ("nightly", (3, 13, 0), True),
    ],
)
def test_torch_without_compile_on_that_python_is_refused(spec, python, ok):
    if ok:
        envs.check_compile_support(envs.parse_spec(spec), python)
        return
    with pytest.raises(envs.EnvError) as error:
        envs.check_compile_support(envs.parse_spec(spec), python)
    assert f"Python {python[0]}.{python[1]}" in str(error.value) and "--python 3." in str(error.value)


def test_env_key_includes_the_interpreter(tmp_path):
    other = _fake_python(tmp_path / "python3.77", "3.77.0")
    assert envs.env_key(envs.Request(envs.parse_spec("2.13.0"))) != envs.env_key(
        envs.Request(envs.parse_spec("2.13.0"), python=str(other))
    )


def test_torch_20_on_python_311_is_refused_before_anything_is_installed(tmp_path):
    home = tmp_path / "home"
    for args in (
        ("env", "add", "2.0.1", "--python", sys.executable),
        ("run", "--case", "append_last", "--torch", "2.0.1", "--python", sys.executable),
    ):
        done = diag(*args, cwd=tmp_path, check=False, env_extra={"DIAG_HOME": str(home)})
        assert done.returncode != 0
        last = done.stderr.strip().splitlines()[-1]
        assert "no torch.compile on Python 3.11" in last and "--python 3.10" in last
    assert not (home / "envs").exists() or not any((home / "envs").iterdir())
    done = diag(
        "env", "add", "2.13.0", "--python", "3.99", cwd=tmp_path, check=False, env_extra={"DIAG_HOME": str(home)}
    )
    assert done.returncode != 0 and "no Python 3.99 found" in done.stderr


@pytest.mark.parametrize(
    "ceiling, version, below",
    [
        ("transformers<5", "5.24.0", False),
        ("transformers<5", "4.57.1", True),
        ("transformers<4.50", "4.57.1", False),
        ("transformers<4.50", "4.49.0", True),
        ("transformers<4.45", "4.45.0", False),
    ],
)
def test_a_transformers_ceiling_is_tried_only_when_the_installed_release_is_above_it(ceiling, version, below):
    assert envs.installing._allows(ceiling, version) is below
