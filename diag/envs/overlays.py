"""A package bisect's environments: one base, and a small overlay per release of the moved package.

The base is the bisect's environment less the moved package (``Request.without``): torch,
transformers and the user's extras, built once. Each release is an environment of its own that
holds only that release and whatever of its dependencies the base lacks or holds at a version it
refuses; the base's site-packages follow its own on the path (a ``.pth`` line), so everything else
is the base's, held as it is. torch is pinned, so a release that asks for another torch fails to
install and is skipped, never run on a torch the bisect did not fix.

A release costs seconds, not a torch install. With ``--installer uv`` each release is a whole
environment as before: uv reads an environment's own site-packages only, so it would install
everything again into the overlay.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from diag.build import Version
from diag.envs import installing
from diag.envs.installing import EnvError, Request, normalised
from diag.envs.interpreters import TorchEnv, byte_compile, site_packages

PTH = "_diag_base.pth"

# torch is what --good and --bad move; pip installs each release, so the base must keep it.
UNMOVABLE = ("torch", "pip")


def check_movable(name: str) -> None:
    """An EnvError, in one line, for a package an overlay cannot move."""
    if normalised(name) == "torch":
        raise EnvError("--package torch: torch builds are bisected with --good and --bad; --package moves another")
    if normalised(name) == "pip":
        raise EnvError("--package pip: pip installs each release over the base environment, so it cannot move")


def resolve(request: Request, name: str, version: str, log=lambda message: None) -> TorchEnv:
    """The environment of ``request`` with ``name`` at ``version``: an overlay of the base less ``name``."""
    check_movable(name)
    if request.installer == "uv":
        return installing.provision(replace(request, extras=(*request.extras, f"{name}=={version}")), log)
    base = installing.provision(replace(request, without=name), log)
    directory = Path(base.path or "").with_name(f"{Path(base.path or '').name}+{_label(name, version)}")
    stamp = installing.read_stamp(directory)
    python = installing.python_in(directory)
    if stamp is not None and python.exists() and stamp.get("base") == base.path:
        if subprocess.run([str(python), "-c", "pass"], capture_output=True).returncode == 0:
            return TorchEnv(request.spec.text, str(python), stamp["torch"], str(directory))
    shutil.rmtree(directory, ignore_errors=True)
    partial = directory.with_name(f"{directory.name}.partial-{os.getpid()}")
    spec = request.spec.text
    try:
        log(f"{name}=={version} over {base.path}")
        installing.run_step(
            [request.python, "-m", "venv", "--without-pip", str(partial)], spec, "creating the overlay", 600
        )
        env_python = str(installing.python_in(partial))
        _link_base(env_python, base.python)
        pin = partial / "torch-pin.txt"
        pin.write_text(f"torch=={base.build()['torch_version']}\n", encoding="utf-8")
        command = installing.installer_command(request, env_python) + ["-c", str(pin)]
        for url in request.extra_index_urls:
            command += ["--extra-index-url", url]
        installing.run_step([*command, f"{name}=={version}"], spec, f"installing {name}=={version}")
        byte_compile(env_python)
        info = {**base.build(), "moved": {name: _installed(env_python, name, version, spec)}}
        info.pop("without", None)
        if normalised(name) == "transformers":
            info["transformers_version"] = version
        stamp = {"spec": spec, "base": base.path, "torch": info, "created": time.time()}
        (partial / installing.STAMP).write_text(json.dumps(stamp, indent=2), encoding="utf-8")
        os.replace(partial, directory)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return TorchEnv(spec, str(installing.python_in(directory)), info, str(directory))


def _label(name: str, version: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", f"{normalised(name)}-{version}")


def _link_base(overlay_python: str, base_python: str) -> None:
    """The base's site-packages after the overlay's own, its ``.pth`` files read as for a site directory."""
    line = f"import site; site.addsitedir({site_packages(base_python)!r})\n"
    Path(site_packages(overlay_python), PTH).write_text(line, encoding="utf-8")


def _installed(python: str, name: str, version: str, spec: str) -> str:
    """The version of ``name`` the overlay imports, which must be ``version``."""
    code = f"from importlib.metadata import version; print(version({name!r}))"
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    found = done.stdout.strip()
    if done.returncode != 0 or not _same(found, version):
        raise EnvError(
            f"torch spec {spec!r}: the overlay imports {name} {found or 'not at all'}, not {version}"
            f"{(': ' + done.stderr.strip().splitlines()[-1]) if done.stderr.strip() else ''}"
        )
    return found


def _same(found: str, wanted: str) -> bool:
    """``found`` is the release ``wanted`` names (``1.0`` is ``1.0.0``, as ``==`` has it)."""
    parsed, asked = Version.lenient(found), Version.lenient(wanted)
    if parsed is None or asked is None:
        return found.strip().lower() == wanted.strip().lower()
    return parsed.key()[:3] == asked.key()[:3]
