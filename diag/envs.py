"""Torch environments: which interpreter a probe runs in, and provisioning new ones.

A spec is ``current`` (the CLI's own interpreter), a path to an existing
python, a release (``2.13.0``), a dated nightly (``2.1.0.dev20230621``), a
nightly prefix (``2.1.0.dev``: the newest nightly of that series) or
``nightly`` (the newest nightly). Releases and nightlies are provisioned as
virtualenvs under ``$DIAG_HOME/envs``, one per environment key, and reused.

The probe is not installed into an environment: every probe process gets the
orchestrator's own ``diag`` package on PYTHONPATH (nothing of the
orchestrator's dependencies), so an environment can never run a stale probe.
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from diag import wheels
from diag.build import DEV_KINDS, BuildError, Spec, Version, nightly_date, python_request
from diag.config import PACKAGE_ROOT, diag_home

# The first torch whose torch.compile runs on each Python: older builds install there but refuse to compile
# ("Python 3.11+ not yet supported for torch.compile" on torch 2.0).
COMPILE_SINCE = {(3, 11): (2, 1), (3, 12): (2, 4), (3, 13): (2, 6)}
# Tried in turn when the newest transformers disables itself on an old torch ("PyTorch >= 2.1 is required").
TRANSFORMERS_FALLBACKS = ("transformers<5", "transformers<4.50", "transformers<4.45", "transformers<4.40")
NIGHTLY_INDEX = "https://download.pytorch.org/whl/nightly/{variant}"
STAMP = ".diag-env.json"


class EnvError(Exception):
    pass


@dataclass(frozen=True)
class TorchEnv:
    spec: str
    python: str
    known_build: Optional[dict] = field(default=None, hash=False)  # None: not looked up yet (see build)
    path: Optional[str] = None

    def build(self) -> dict:
        """torch version, commit and CUDA version; looked up only when a probe died before reporting them."""
        if self.known_build is not None:
            return self.known_build
        try:
            return describe(self.spec, self.python)
        except EnvError:
            return {"torch_version": "unknown", "git_version": None, "cuda_version": None}

    def probe_command(self, *args: str) -> list[str]:
        return [self.python, "-m", "diag.probe", *args]

    def probe_environ(self) -> dict[str, str]:
        """The caller's environment plus the diag package on PYTHONPATH (nothing of diag's dependencies)."""
        env = dict(os.environ)
        root = str(probe_path())
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env


@dataclass(frozen=True)
class Request:
    """Everything that decides what a provisioned environment contains."""
    spec: str
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

    @property
    def kind(self) -> str:
        return parse_spec(self.spec).kind

    @property
    def index(self) -> str:
        """The index torch nightlies are looked up on (and their dependencies installed from)."""
        return self.index_url or NIGHTLY_INDEX.format(variant=self.variant)


def probe_path() -> Path:
    """A folder that holds the diag package alone, for the probe's PYTHONPATH.

    Installed from a wheel, diag's parent folder is a site-packages full of the orchestrator's
    dependencies, which must not shadow the target environment's own. A link named ``diag`` in a
    folder of its own exposes the package and nothing beside it. Where links cannot be made,
    the package's parent folder is used.
    """
    folder = diag_home() / "probe-path" / hashlib.sha1(str(PACKAGE_ROOT).encode()).hexdigest()[:12]
    link = folder / "diag"
    if link.exists():
        return folder
    try:
        folder.mkdir(parents=True, exist_ok=True)
        link.symlink_to(PACKAGE_ROOT, target_is_directory=True)
    except FileExistsError:
        pass
    except OSError:
        return PACKAGE_ROOT.parent
    return folder


def parse_spec(spec: str) -> Spec:
    """What a ``--torch`` value asks for (``build.Spec``); EnvError, in one line, when it names nothing."""
    try:
        return Spec.parse(spec)
    except BuildError as exc:
        raise EnvError(str(exc)) from exc


def python_version(python: str) -> tuple[int, int, int]:
    """``sys.version_info[:3]`` of ``python``; EnvError when it does not run."""
    try:
        done = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:3])"], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvError(f"python {python}: cannot run it: {exc}") from exc
    if done.returncode != 0 or len(done.stdout.split()) != 3:
        last = (done.stderr.strip().splitlines() or ["no version printed"])[-1]
        raise EnvError(f"python {python}: cannot run it ({last})")
    major, minor, micro = (int(part) for part in done.stdout.split())
    return major, minor, micro


def _pyenv_pythons(version: str) -> list[str]:
    """Interpreters pyenv installed for ``version`` (3.10 matches 3.10.13), newest first."""
    roots = [os.environ.get("PYENV_ROOT", ""), str(Path.home() / ".pyenv")]
    pyenv = shutil.which("pyenv")
    if pyenv:
        done = subprocess.run([pyenv, "root"], capture_output=True, text=True)
        roots.insert(0, done.stdout.strip() if done.returncode == 0 else "")
    found: list[str] = []
    for root in dict.fromkeys(r for r in roots if r):
        versions = Path(root) / "versions"
        if versions.is_dir():
            for directory in sorted(versions.glob(f"{version}*"), reverse=True):
                name = directory.name
                if name == version or name.startswith(version + "."):
                    found.append(str(directory / "bin" / "python"))
    return found


def _uv_python(version: str) -> list[str]:
    uv = shutil.which("uv")
    if uv is None:
        return []
    done = subprocess.run([uv, "python", "find", version], capture_output=True, text=True)
    return [done.stdout.strip()] if done.returncode == 0 and done.stdout.strip() else []


def find_python(value: Optional[str]) -> str:
    """The interpreter ``--python`` names: a path, or a version found on PATH, through pyenv or uv.

    None is the CLI's own interpreter. A version (``3.10``) is checked by running each candidate,
    since a pyenv shim on PATH may exist for a version that is not active. The error names what was tried.
    """
    if value is None:
        return sys.executable
    wanted = python_request(value)
    if wanted is None:
        path = Path(value).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            python_version(str(path))
            return str(path.absolute())
        raise EnvError(f"--python {value!r}: not an executable file, and not a version like 3.10")
    version = f"{wanted[0]}.{wanted[1]}"
    tried: list[str] = []
    sources = [("PATH", [shutil.which(f"python{version}") or ""]), ("pyenv", _pyenv_pythons(version)),
               ("uv python find", _uv_python(version))]
    for source, candidates in sources:
        candidates = [c for c in candidates if c]
        tried.append(f"{source} ({', '.join(candidates) or 'none'})")
        for candidate in candidates:
            try:
                if python_version(candidate)[:2] == wanted:
                    return candidate
            except EnvError:
                continue
    raise EnvError(f"--python {value}: no Python {version} found; tried {'; '.join(tried)}")


def check_compile_support(spec: str, version: tuple[int, ...]) -> None:
    """EnvError, before anything is installed, when the spec's torch has no torch.compile on this Python."""
    series = parse_spec(spec).series
    needed = COMPILE_SINCE.get(tuple(version[:2]))
    if series is None or needed is None or series >= needed:
        return
    supported = [p for p, t in COMPILE_SINCE.items() if t <= series]
    fits = max(supported) if supported else (3, min(COMPILE_SINCE)[1] - 1)
    raise EnvError(f"torch spec {spec!r}: torch {series[0]}.{series[1]} has no torch.compile on Python "
                   f"{version[0]}.{version[1]} (it needs torch >= {needed[0]}.{needed[1]}); "
                   f"choose an older Python, e.g. --python {fits[0]}.{fits[1]}")


def _installer(request: Request, python: str) -> list[str]:
    if request.installer == "uv":
        return ["uv", "pip", "install", "--python", python]
    return [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]


def torch_install_command(request: Request, python: str) -> list[str]:
    """Step 1 for a release: torch alone, by pip's (or uv's) own resolution; nightlies and wheels are
    found first (find_wheel) and installed as files (wheel_install_command)."""
    command = _installer(request, python)
    if request.index_url:
        command += ["--index-url", request.index_url]
    for url in request.extra_index_urls:
        command += ["--extra-index-url", url]
    for folder in request.find_links:
        command += ["--find-links", folder]
    if request.kind != "release":
        raise EnvError(f"torch spec {request.spec!r} is not a release; nightlies are installed from their wheel")
    return command + [f"torch=={request.spec}"]


def _python_tag(tags: list[str]) -> str:
    return next((t.split("-")[0] for t in tags if t.startswith("cp")), "?")


def find_wheel(request: Request) -> wheels.Wheel:
    """The torch wheel a nightly or wheel spec installs, found before anything is installed.

    A dated nightly: ``--find-links`` folders and the wheel cache, then the index listing, then its
    direct URL (the index keeps about two months of nightlies listed; older wheels stay at their
    URLs). A prefix or ``nightly``: the newest such wheel in the folders, the cache and the listing.
    A wheel spec: that URL or file. EnvError, in one line, when there is none.
    """
    spec, wanted = request.spec, parse_spec(request.spec)
    kind = wanted.kind
    try:
        if kind == "wheel":
            return _given_wheel(spec)
        tags = wheels.supported_tags(request.python)
        folders = [Path(f).expanduser() for f in request.find_links]
        local = wheels.local_wheels(folders, "find-links") + wheels.local_wheels([wheels.cache_dir()], "wheel cache")
        try:
            listed, unlisted_why = wheels.listed_wheels(request.index), ""
        except wheels.WheelError as exc:
            listed, unlisted_why = [], f" ({exc})"
        rank = {tag: index for index, tag in enumerate(tags)}

        def fits(wheel: wheels.Wheel) -> bool:
            return (bool(wheel.tags() & rank.keys()) and wheel.label in (None, request.variant)
                    and wanted.admits(wheel.version))

        def preference(wheel: wheels.Wheel) -> int:
            return min(rank.get(tag, len(rank)) for tag in wheel.tags())

        found = [w for w in local + listed if fits(w)]
        python_tag = _python_tag(tags)
        places = ", ".join([*(str(f) for f in folders), str(wheels.cache_dir())])
        if kind == "nightly_date":
            if found:
                return min(found, key=preference)
            urls = wheels.direct_urls(request.index, spec, request.variant, tags)
            for url in urls:
                if wheels.exists(url):
                    return wheels.Wheel(urllib.parse.unquote(url.rsplit("/", 1)[-1]), url, "direct URL")
            raise EnvError(f"torch spec {spec!r}: no {request.variant} wheel for {python_tag}: none in {places}, "
                           f"none listed on {request.index}{unlisted_why}, and none at its direct URL "
                           f"({urls[0] if urls else 'no platform tag fits'}); is there a nightly of that date?")
        if not found:
            if kind == "nightly_prefix":
                series = ".".join(map(str, wanted.version.release))
                raise EnvError(f"torch spec {spec!r}: {request.index} lists no {series} nightly for {python_tag} "
                               f"({request.variant}){unlisted_why}, and none is in {places}; the nightly index keeps "
                               f"about two months of nightlies. Use a dated nightly ({series}.devYYYYMMDD, installed "
                               f"by its direct wheel URL), a wheel URL or --find-links DIR, or the release {series}")
            raise EnvError(f"torch spec 'nightly': {request.index} lists no nightly for {python_tag} "
                           f"({request.variant}){unlisted_why}")
        return max(found, key=lambda w: (Version.parse(w.version).key(), -preference(w)))
    except wheels.WheelError as exc:
        raise EnvError(f"torch spec {spec!r}: {exc}") from exc


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
    command = _installer(request, python)
    if request.kind in DEV_KINDS:
        command += ["--extra-index-url", request.index]
    for url in request.extra_index_urls:
        command += ["--extra-index-url", url]
    return command + [str(wheel_file)]


def extras_install_command(request: Request, python: str, constraint_file: str) -> list[str]:
    """Step 2: transformers and the user's extras from the user's own index, torch pinned by a constraint."""
    extras = list(request.extras)
    if not names_transformers(request.extras):
        extras.append("transformers")
    command = _installer(request, python) + ["-c", constraint_file]
    for url in request.extra_index_urls:
        command += ["--extra-index-url", url]
    return command + extras


def env_key(request: Request) -> str:
    python_version = subprocess.run([request.python, "-c", "import sys; print(sys.version)"],
                                    capture_output=True, text=True).stdout.strip()
    # python, python3 and python3.11 may name one interpreter: key on the file they resolve to.
    python = os.path.realpath(request.python)
    spec = request.spec if request.kind != "wheel" else request.spec.rsplit("/", 1)[-1]  # the build, not its place
    parts = [spec, *sorted(request.extras), python, python_version, request.index_url or "",
             *request.extra_index_urls, request.variant, request.installer]
    digest = hashlib.sha1("\x1f".join(parts).encode()).hexdigest()[:10]
    label = re.sub(r"[^A-Za-z0-9.]+", "-", urllib.parse.unquote(spec)).strip("-")
    return f"torch-{label}-{digest}"


def envs_dir() -> Path:
    return diag_home() / "envs"


def _env_python(directory: Path) -> Path:
    return directory / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def read_stamp(directory: Path) -> Optional[dict[str, Any]]:
    try:
        return json.loads((directory / STAMP).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _run(command: list[str], spec: str, what: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvError(f"torch spec {spec!r}: {what} failed: {exc}") from exc
    if done.returncode != 0:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        reason = next((line for line in reversed(lines) if "error" in line.lower()), lines[-1] if lines else "")
        raise EnvError(f"torch spec {spec!r}: {what} failed: {reason.strip()}")
    return done


def provision(request: Request, log=lambda message: None, wheel: Optional[wheels.Wheel] = None,
              label: Optional[str] = None) -> TorchEnv:
    """The environment for ``request``: reused when its stamp says it is complete, else built.

    A nightly or wheel spec's wheel is found before anything is created (``wheel``, when the
    caller found it already), fetched into the wheel cache, checked against ``request.sha256``
    when one is given, and installed as a file. ``label``: the spec as the user wrote it.
    """
    label = label or request.spec
    directory = envs_dir() / env_key(request)
    stamp = read_stamp(directory)
    python = _env_python(directory)
    if stamp is not None and python.exists():
        if subprocess.run([str(python), "-c", "pass"], capture_output=True).returncode == 0:
            return TorchEnv(label, str(python), stamp["torch"], str(directory))
    if directory.exists():
        shutil.rmtree(directory, ignore_errors=True)
    check_compile_support(request.spec, python_version(request.python))
    if wheel is None and request.kind in (*DEV_KINDS, "wheel"):
        wheel = find_wheel(request)
    if request.installer == "uv" and shutil.which("uv") is None:
        raise EnvError(f"torch spec {request.spec!r}: --installer uv asked for, but uv is not on PATH")
    envs_dir().mkdir(parents=True, exist_ok=True)
    partial = directory.with_name(f"{directory.name}.partial-{os.getpid()}")
    try:
        log(f"provisioning {request.spec} in {directory}")
        _run([request.python, "-m", "venv", str(partial)], request.spec, "creating the virtualenv", 600)
        env_python = str(_env_python(partial))
        if wheel is None:
            _run(torch_install_command(request, env_python), request.spec, "installing torch")
        else:
            source = _install_wheel(request, env_python, wheel, log)
        info = describe(request.spec, env_python)
        wanted = request.spec if wheel is None or request.kind != "wheel" else wheel.base_version
        if not parse_spec(wanted).admits(info["torch_version"]):
            raise EnvError(f"torch spec {request.spec!r}: the installer gave torch {info['torch_version']}, "
                           "not the requested build (is that nightly on the index?)")
        if wheel is not None:
            info["wheel"] = source
        pin = partial / "torch-pin.txt"
        pin.write_text(f"torch=={info['torch_version']}\n", encoding="utf-8")
        _run(extras_install_command(request, env_python, str(pin)), request.spec, "installing transformers and extras")
        info["transformers_version"] = _working_transformers(request, env_python, str(pin), log)
        stamp = {"spec": request.spec, "request": request.__dict__, "torch": info, "created": time.time()}
        (partial / STAMP).write_text(json.dumps(stamp, indent=2, default=list), encoding="utf-8")
        os.replace(partial, directory)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return TorchEnv(label, str(_env_python(directory)), stamp["torch"], str(directory))


def _install_wheel(request: Request, python: str, wheel: wheels.Wheel, log) -> dict[str, str]:
    """Fetch, check and install a found wheel; where it came from and its sha256, for the build's record."""
    log(f"torch wheel {wheel.filename} from {wheel.origin}: {wheel.location}")
    try:
        path, sha256 = wheels.fetch(wheel)
    except wheels.WheelError as exc:
        raise EnvError(f"torch spec {request.spec!r}: {exc}") from exc
    if request.sha256 and sha256 != request.sha256:
        raise EnvError(f"torch spec {request.spec!r}: the wheel's sha256 is {sha256}, not the recorded "
                       f"{request.sha256}: it is not the build that was run")
    _run(wheel_install_command(request, python, path), request.spec, "installing torch")
    return {"url": wheel.location, "origin": wheel.origin, "sha256": sha256, "filename": wheel.filename}


_TRANSFORMERS_SEES_TORCH = ("import json\ntry:\n    import transformers\n    from transformers.utils import "
                            "is_torch_available\n    print(json.dumps([transformers.__version__, "
                            "bool(is_torch_available())]))\nexcept ImportError:\n    print(json.dumps([None, False]))")


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
        _run(_installer(request, python) + ["-c", pin, ceiling], request.spec, f"installing {ceiling}")
        version, sees_torch = _transformers_state(python)
        if sees_torch:
            return version
    raise EnvError(f"torch spec {request.spec!r}: no transformers release tried "
                   f"({', '.join(TRANSFORMERS_FALLBACKS)}) accepts this torch; pin one with --with transformers==X")


def _allows(ceiling: str, version: str) -> bool:
    """Does ``transformers<X`` admit ``version``? (If it already does, that ceiling changes nothing.)"""
    bound = Version.parse(ceiling.split("<", 1)[1]).key()
    current = Version.lenient(version)
    return current is not None and current.key() < bound


def names_transformers(extras: tuple[str, ...]) -> bool:
    return any(re.split(r"[<>=!~\[ ;]", e, maxsplit=1)[0].lower() == "transformers" for e in extras)


@dataclass(frozen=True)
class Options:
    """How environments are provisioned: the CLI's --with, --index-url, --variant, --installer,
    --python and --find-links."""
    extras: tuple[str, ...] = ()
    index_url: Optional[str] = None
    variant: str = "cpu"
    installer: str = "pip"
    python: Optional[str] = None
    find_links: tuple[str, ...] = ()

    def request(self, spec: str, sha256: Optional[str] = None) -> Request:
        return Request(spec=spec, extras=tuple(self.extras), python=find_python(self.python),
                       index_url=self.index_url, variant=self.variant, installer=self.installer,
                       find_links=tuple(self.find_links), sha256=sha256)


def resolve(spec: str, options: Options = Options(), log=lambda message: None,
            sha256: Optional[str] = None) -> TorchEnv:
    """The environment for a spec: an interpreter as it is, else a provisioned one.

    A nightly prefix or ``nightly`` is first resolved to the newest dated nightly there is, and
    the environment is that build's: a machine that keeps its environments never reuses
    yesterday's nightly for today's.
    """
    kind = parse_spec(spec).kind
    if kind == "current" and options.python is not None:
        spec, kind = find_python(options.python), "python"
    if kind == "current":
        # The CLI's own interpreter: importing torch just to name it would add seconds to every run.
        return TorchEnv(spec, sys.executable)
    if kind == "python":
        path = Path(spec).expanduser()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise EnvError(f"torch spec {spec!r}: no executable python at that path")
        return TorchEnv(spec, str(path.absolute()), describe(spec, str(path)))
    request = options.request(spec, sha256)
    if kind in ("nightly_prefix", "nightly"):
        wheel = find_wheel(request)
        log(f"{spec}: the newest is {wheel.base_version} ({wheel.origin})")
        return provision(replace(request, spec=wheel.base_version), log, wheel, label=spec)
    return provision(request, log)


_DESCRIBE = ("import json, torch; print(json.dumps({'torch_version': torch.__version__, "
             "'git_version': getattr(torch.version, 'git_version', None), "
             "'cuda_version': getattr(torch.version, 'cuda', None)}))")


def describe(spec: str, python: str) -> dict:
    """torch version, git commit and CUDA version of ``python``; EnvError naming the spec when it has no torch."""
    try:
        done = subprocess.run([python, "-c", _DESCRIBE], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvError(f"torch spec {spec!r}: cannot run {python}: {exc}") from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvError(f"torch spec {spec!r}: {python} cannot import torch ({last})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def listing() -> list[dict[str, Any]]:
    """Provisioned environments with their torch build, size on disk and path."""
    rows = []
    if not envs_dir().is_dir():
        return rows
    for directory in sorted(envs_dir().iterdir()):
        stamp = read_stamp(directory) if directory.is_dir() else None
        if stamp is None:
            continue
        size = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and not p.is_symlink())
        rows.append({"name": directory.name, "spec": stamp["spec"], "torch_version": stamp["torch"]["torch_version"],
                     "git_version": stamp["torch"].get("git_version"),
                     "nightly_date": nightly_date(stamp["torch"]["torch_version"]),
                     "size_mb": round(size / 2**20, 1), "path": str(directory)})
    return rows


def remove(name: str) -> Path:
    directory = envs_dir() / name
    if not name or "/" in name or not (directory / STAMP).exists():
        raise EnvError(f"no provisioned environment named {name!r} (see diag env list)")
    shutil.rmtree(directory)
    return directory
