"""Provisioned environments: a virtualenv per environment key under ``$DIAG_HOME/envs``, built in two
steps (torch alone; then transformers and the user's extras with torch pinned), stamped when
complete and reused; a half-built one is deleted. Nightlies and wheels are found first
(``find_wheel``) and installed as files.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from diag.build import DEV_KINDS, Spec, Version
from diag.config import diag_home
from diag.envs import wheels
from diag.envs.interpreters import (
    EnvError,
    TorchEnv,
    byte_compile,
    check_compile_support,
    describe,
    parse_spec,
    python_version,
)

# Tried in turn when the newest transformers disables itself on an old torch ("PyTorch >= 2.1 is required").
TRANSFORMERS_FALLBACKS = ("transformers<5", "transformers<4.50", "transformers<4.45", "transformers<4.40")

NIGHTLY_INDEX = "https://download.pytorch.org/whl/nightly/{variant}"

STAMP = ".diag-env.json"


@dataclass(frozen=True)
class Request:
    """Everything that decides what a provisioned environment contains."""

    spec: Spec
    extras: tuple[str, ...] = ()
    python: str = sys.executable
    index_url: Optional[str] = None
    extra_index_urls: tuple[str, ...] = ()
    variant: str = "cpu"
    installer: str = "pip"
    # Where wheels may also be found, and the sha256 a wheel must have (a re-install of a recorded
    # build). Neither changes what the environment holds, so neither is part of its key.
    find_links: tuple[str, ...] = ()
    sha256: Optional[str] = None
    # A package bisect's base: all the request installs less this distribution (see overlays.py).
    without: Optional[str] = None

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def index(self) -> str:
        """The index torch nightlies are looked up on (and their dependencies installed from)."""
        return self.index_url or NIGHTLY_INDEX.format(variant=self.variant)


def installer_command(request: Request, python: str) -> list[str]:
    if request.installer == "uv":
        return ["uv", "pip", "install", "--python", python]
    # --no-compile: the environment is byte-compiled once it is complete, on every core (byte_compile).
    return [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--no-compile"]


def torch_install_command(request: Request, python: str) -> list[str]:
    """Step 1 for a release: torch alone, by pip's (or uv's) own resolution; nightlies and wheels are
    found first (find_wheel) and installed as files (wheel_install_command)."""
    command = installer_command(request, python)
    if request.index_url:
        command += ["--index-url", request.index_url]
    for url in request.extra_index_urls:
        command += ["--extra-index-url", url]
    for folder in request.find_links:
        command += ["--find-links", folder]
    if request.kind != "release":
        raise EnvError(f"torch spec {request.spec.text!r} is not a release; nightlies are installed from their wheel")
    return command + [f"torch=={request.spec.text}"]


def _python_tag(tags: list[str]) -> str:
    return next((t.split("-")[0] for t in tags if t.startswith("cp")), "?")


def find_wheel(request: Request) -> wheels.Wheel:
    """The torch wheel a nightly or wheel spec installs, found before anything is installed.

    A dated nightly: ``--find-links`` folders and the wheel cache, then the index listing, then its
    direct URL (the index keeps about two months of nightlies listed; older wheels stay at their
    URLs). A prefix or ``nightly``: the newest such wheel in the folders, the cache and the listing.
    A wheel spec: that URL or file. EnvError, in one line, when there is none.
    """
    spec, wanted = request.spec.text, request.spec
    try:
        if wanted.kind == "wheel":
            return _given_wheel(spec)
        tags = wheels.supported_tags(request.python)
        found, preference, places, unlisted_why = _candidates(request, wanted, tags)
        found = _whole(found)
        if wanted.kind == "nightly_date":
            if found:
                return min(found, key=preference)
            urls = wheels.direct_urls(request.index, spec, request.variant, tags)
            for url in urls:
                if wheels.exists(url):
                    return wheels.Wheel(urllib.parse.unquote(url.rsplit("/", 1)[-1]), url, "direct URL")
            raise EnvError(
                f"torch spec {spec!r}: no {request.variant} wheel for {_python_tag(tags)}: none in {places}, "
                f"none listed on {request.index}{unlisted_why}, and none at its direct URL "
                f"({urls[0] if urls else 'no platform tag fits'}); is there a nightly of that date?"
            )
        if not found:
            raise _no_nightly(request, wanted, _python_tag(tags), places, unlisted_why)
        return max(found, key=lambda w: (Version.parse(w.version).key(), -preference(w)))
    except wheels.WheelError as exc:
        raise EnvError(f"torch spec {spec!r}: {exc}") from exc


def _whole(found: list[wheels.Wheel]) -> list[wheels.Wheel]:
    """``found`` less the cached wheels that are no longer what was fetched (each checked by its
    sha256; a damaged one is removed from the cache, so the index or its URL serves it again)."""
    return [w for w in found if w.origin != "wheel cache" or wheels.still_whole(Path(w.location), w.sha256)]


def _candidates(request: Request, wanted: Spec, tags: list[str]):
    """The wheels that fit the spec, this python's tags and the variant, from the ``--find-links``
    folders, the wheel cache and the index listing; how well each fits this python (lower is better);
    the places searched; and why the listing could not be read ("" where it could)."""
    folders = [Path(f).expanduser() for f in request.find_links]
    local = wheels.local_wheels(folders, "find-links") + wheels.cached_wheels()
    try:
        listed, unlisted_why = wheels.listed_wheels(request.index), ""
    except wheels.WheelError as exc:
        listed, unlisted_why = [], f" ({exc})"
    rank = {tag: index for index, tag in enumerate(tags)}

    def fits(wheel: wheels.Wheel) -> bool:
        fitting_tag = bool(wheel.tags() & rank.keys())
        return fitting_tag and wheel.label in (None, request.variant) and wanted.admits(wheel.version)

    def preference(wheel: wheels.Wheel) -> int:
        return min(rank.get(tag, len(rank)) for tag in wheel.tags())

    places = ", ".join([*(str(f) for f in folders), str(wheels.cache_dir())])
    return [w for w in local + listed if fits(w)], preference, places, unlisted_why


def _no_nightly(request: Request, wanted: Spec, python_tag: str, places: str, unlisted_why: str) -> EnvError:
    """The error of a nightly prefix or ``nightly`` that no wheel fits."""
    if wanted.kind == "nightly_prefix" and wanted.version is not None:
        series = ".".join(map(str, wanted.version.release))
        return EnvError(
            f"torch spec {request.spec.text!r}: {request.index} lists no {series} nightly for {python_tag} "
            f"({request.variant}){unlisted_why}, and none is in {places}; the nightly index keeps "
            f"about two months of nightlies. Use a dated nightly ({series}.devYYYYMMDD, installed "
            f"by its direct wheel URL), a wheel URL or --find-links DIR, or the release {series}"
        )
    return EnvError(
        f"torch spec 'nightly': {request.index} lists no nightly for {python_tag} ({request.variant}){unlisted_why}"
    )


def _given_wheel(spec: str) -> wheels.Wheel:
    name = urllib.parse.unquote(spec.rsplit("/", 1)[-1])
    if not name.startswith("torch-") or not wheels.is_wheel_name(name):
        raise EnvError(f"torch spec {spec!r}: not a torch wheel (torch-VERSION-PYTHON-ABI-PLATFORM.whl)")
    if "://" in spec and not spec.startswith("file://"):
        if not wheels.exists(spec):
            raise EnvError(f"torch spec {spec!r}: nothing is served at that URL")
        return wheels.Wheel(name, spec, "given")
    path = Path(spec[7:] if spec.startswith("file://") else spec).expanduser()
    if not path.is_file():
        raise EnvError(f"torch spec {spec!r}: no such wheel file")
    return wheels.Wheel(name, str(path.absolute()), "given")


def wheel_install_command(request: Request, python: str, wheel_file: Path) -> list[str]:
    """Step 1 for a found wheel: that file; its dependencies from the user's index and the nightly index."""
    command = installer_command(request, python)
    if request.kind in DEV_KINDS:
        command += ["--extra-index-url", request.index]
    for url in request.extra_index_urls:
        command += ["--extra-index-url", url]
    return command + [str(wheel_file)]


def extras_install_command(request: Request, python: str, constraint_file: str) -> Optional[list[str]]:
    """Step 2: transformers and the user's extras from the user's own index, torch pinned by a constraint
    (None where there is nothing to install: a base without transformers, and no extras)."""
    extras = list(request.extras)
    if not names_transformers(request.extras) and not _is_without(request, "transformers"):
        extras.append("transformers")
    if not extras:
        return None
    command = installer_command(request, python) + ["-c", constraint_file]
    for url in request.extra_index_urls:
        command += ["--extra-index-url", url]
    return command + extras


def uninstall_command(request: Request, python: str, name: str) -> list[str]:
    """``name`` out of the environment of ``python`` (where it is not installed, nothing is done)."""
    if request.installer == "uv":
        return ["uv", "pip", "uninstall", "--python", python, name]
    return [python, "-m", "pip", "uninstall", "--disable-pip-version-check", "--yes", name]


def normalised(name: str) -> str:
    """A distribution's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _is_without(request: Request, name: str) -> bool:
    return normalised(request.without or "") == normalised(name)


def env_key(request: Request) -> str:
    python_version = subprocess.run(
        [request.python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True
    ).stdout.strip()
    # python, python3 and python3.11 may name one interpreter: key on the file they resolve to.
    python = os.path.realpath(request.python)
    spec = request.spec.text
    spec = spec if request.kind != "wheel" else spec.rsplit("/", 1)[-1]  # the build, not its place
    parts = [
        spec,
        *sorted(request.extras),
        python,
        python_version,
        request.index_url or "",
        *request.extra_index_urls,
        request.variant,
        request.installer,
        *([f"without {normalised(request.without)}"] if request.without else []),
    ]
    digest = hashlib.sha1("\x1f".join(parts).encode()).hexdigest()[:10]
    label = re.sub(r"[^A-Za-z0-9.]+", "-", urllib.parse.unquote(spec)).strip("-")
    less = f"-without-{re.sub(r'[^a-z0-9.-]+', '-', normalised(request.without))}" if request.without else ""
    return f"torch-{label}{less}-{digest}"


def envs_dir() -> Path:
    return diag_home() / "envs"


def python_in(directory: Path) -> Path:
    return directory / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def read_stamp(directory: Path) -> Optional[dict[str, Any]]:
    try:
        return json.loads((directory / STAMP).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def run_step(command: list[str], spec: str, what: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvError(f"torch spec {spec!r}: {what} failed: {exc}") from exc
    if done.returncode != 0:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        reason = next((line for line in reversed(lines) if "error" in line.lower()), lines[-1] if lines else "")
        raise EnvError(f"torch spec {spec!r}: {what} failed: {reason.strip()}")
    return done


def provision(
    request: Request, log=lambda message: None, wheel: Optional[wheels.Wheel] = None, label: Optional[str] = None
) -> TorchEnv:
    """The environment for ``request``: reused when its stamp says it is complete, else built.

    A nightly or wheel spec's wheel is found before anything is created (``wheel``, when the
    caller found it already), fetched into the wheel cache, checked against ``request.sha256``
    when one is given, and installed as a file. ``label``: the spec as the user wrote it.
    """
    label = label or request.spec.text
    directory = envs_dir() / env_key(request)
    stamp = read_stamp(directory)
    python = python_in(directory)
    if stamp is not None and python.exists():
        if subprocess.run([str(python), "-c", "pass"], capture_output=True).returncode == 0:
            return TorchEnv(label, str(python), stamp["torch"], str(directory))
    if directory.exists():
        shutil.rmtree(directory, ignore_errors=True)
    check_compile_support(request.spec, python_version(request.python))
    if wheel is None and request.kind in (*DEV_KINDS, "wheel"):
        wheel = find_wheel(request)
    if request.installer == "uv" and shutil.which("uv") is None:
        raise EnvError(f"torch spec {request.spec.text!r}: --installer uv asked for, but uv is not on PATH")
    envs_dir().mkdir(parents=True, exist_ok=True)
    partial = directory.with_name(f"{directory.name}.partial-{os.getpid()}")
    try:
        log(f"provisioning {request.spec.text} in {directory}")
        run_step([request.python, "-m", "venv", str(partial)], request.spec.text, "creating the virtualenv", 600)
        env_python = str(python_in(partial))
        if wheel is None:
            run_step(torch_install_command(request, env_python), request.spec.text, "installing torch")
        else:
            source = _install_wheel(request, env_python, wheel, log)
        byte_compile(env_python)  # before torch is imported to describe it; the end's compiles only what is new
        info = describe(request.spec.text, env_python)
        wanted = request.spec if wheel is None or request.kind != "wheel" else parse_spec(wheel.base_version)
        if not wanted.admits(info["torch_version"]):
            raise EnvError(
                f"torch spec {request.spec.text!r}: the installer gave torch {info['torch_version']}, "
                "not the requested build (is that nightly on the index?)"
            )
        if wheel is not None:
            info["wheel"] = source
        pin = partial / "torch-pin.txt"
        pin.write_text(f"torch=={info['torch_version']}\n", encoding="utf-8")
        info.update(_beside_torch(request, env_python, str(pin), log))
        byte_compile(env_python)
        asked = {**request.__dict__, "spec": request.spec.text}
        stamp = {"spec": request.spec.text, "request": asked, "torch": info, "created": time.time()}
        (partial / STAMP).write_text(json.dumps(stamp, indent=2, default=list), encoding="utf-8")
        os.replace(partial, directory)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return TorchEnv(label, str(python_in(directory)), stamp["torch"], str(directory))


def _beside_torch(request: Request, python: str, pin: str, log) -> dict[str, Any]:
    """Step 2, torch pinned: transformers (a release that accepts this torch) and the extras, then the
    moved package of a bisect's base taken out; what the build's record gains."""
    extras = extras_install_command(request, python, pin)
    if extras is not None:
        run_step(extras, request.spec.text, "installing transformers and extras")
    added: dict[str, Any] = {}
    if not _is_without(request, "transformers"):
        added["transformers_version"] = _working_transformers(request, python, pin, log)
    if request.without:
        run_step(
            uninstall_command(request, python, request.without), request.spec.text, "leaving out the moved package"
        )
        added["without"] = request.without
    return added


def _install_wheel(request: Request, python: str, wheel: wheels.Wheel, log) -> dict[str, str]:
    """Fetch, check and install a found wheel; where it came from and its sha256, for the build's record."""
    log(f"torch wheel {wheel.filename} from {wheel.origin}: {wheel.location}")
    try:
        path, sha256 = wheels.fetch(wheel)
    except wheels.WheelError as exc:
        raise EnvError(f"torch spec {request.spec.text!r}: {exc}") from exc
    if request.sha256 and sha256 != request.sha256:
        raise EnvError(
            f"torch spec {request.spec.text!r}: the wheel's sha256 is {sha256}, not the recorded "
            f"{request.sha256}: it is not the build that was run"
        )
    run_step(wheel_install_command(request, python, path), request.spec.text, "installing torch")
    return {"url": wheel.location, "origin": wheel.origin, "sha256": sha256, "filename": wheel.filename}


_TRANSFORMERS_SEES_TORCH = (
    "import json\ntry:\n    import transformers\n    from transformers.utils import "
    "is_torch_available\n    print(json.dumps([transformers.__version__, "
    "bool(is_torch_available())]))\nexcept ImportError:\n    print(json.dumps([None, False]))"
)


def _transformers_state(python: str) -> tuple[Optional[str], bool]:
    done = subprocess.run([python, "-c", _TRANSFORMERS_SEES_TORCH], capture_output=True, text=True, timeout=300)
    try:
        version, sees_torch = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return None, False
    return version, sees_torch


def _working_transformers(request: Request, python: str, pin: str, log) -> Optional[str]:
    """The installed transformers version, after stepping back to an older one while it disables torch.

    Each transformers release names the oldest torch it accepts and turns its torch models off below
    that; unless the user pinned transformers, older releases are tried in turn (TRANSFORMERS_FALLBACKS).
    """
    version, sees_torch = _transformers_state(python)
    if sees_torch or names_transformers(request.extras):
        return version
    for ceiling in TRANSFORMERS_FALLBACKS:
        if version is not None and _allows(ceiling, version):  # already below it: nothing to change
            continue
        log(f"transformers {version} does not accept this torch; trying {ceiling}")
        run_step(installer_command(request, python) + ["-c", pin, ceiling], request.spec.text, f"installing {ceiling}")
        version, sees_torch = _transformers_state(python)
        if sees_torch:
            return version
    raise EnvError(
        f"torch spec {request.spec.text!r}: no transformers release tried "
        f"({', '.join(TRANSFORMERS_FALLBACKS)}) accepts this torch; pin one with --with transformers==X"
    )


def _allows(ceiling: str, version: str) -> bool:
    """Does ``transformers<X`` admit ``version``? (If it already does, that ceiling changes nothing.)"""
    bound = Version.parse(ceiling.split("<", 1)[1]).key()
    current = Version.lenient(version)
    return current is not None and current.key() < bound


def names_transformers(extras: tuple[str, ...]) -> bool:
    return any(re.split(r"[<>=!~\[ ;]", e, maxsplit=1)[0].lower() == "transformers" for e in extras)
