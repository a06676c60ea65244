"""Torch builds: the one parser of version strings, ``--torch`` specs and wheel names, and the one
order of builds.

Every string that names a torch build passes through here, whichever command reads it:
- a version as torch reports it: ``2.13.0+cpu``, ``2.1.0.dev20230801+cu121``, ``2.1.0a0+git1234abc``;
- a ``--torch`` spec: ``current``, ``nightly``, a release (``2.13`` or ``2.13.0``), a dated nightly
  (``2.1.0.dev20230621``), a nightly series (``2.1.0.dev``: its newest nightly), a wheel (URL or path,
  ``.whl``) or a path to a python;
- a wheel's file name or URL: ``torch-2.1.0.dev20230621%2Bcu118-cp311-cp311-linux_x86_64.whl``.

The build a run recorded (``identity``) is a dict, as the store keeps it; ``order`` sorts such dicts.
"""

from __future__ import annotations

import datetime
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

if TYPE_CHECKING:  # the store imports this module
    from diag.store.typed import TorchBuildRow

from diag.errors import DiagError

_VERSION = re.compile(
    r"^(?P<release>\d+(?:\.\d+)*)(?P<pre>(?:a|b|rc)\d+)?(?P<post>\.post\d+)?(?P<dev>\.dev(?P<number>\d*))?"
    r"(?:\+(?P<local>[A-Za-z0-9.]+))?$"
)
_VARIANT = re.compile(r"^(cpu|cu\d+|rocm[\d.]+|xpu)$")
_PRE = re.compile(r"^(a|b|rc)(\d+)$")
_PYTHON = re.compile(r"^(?:python)?(?P<major>3)\.(?P<minor>\d+)(?:\.\d+)?$")
_WHEEL = re.compile(
    r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[^-]+)(?:-(?P<build>\d[^-]*))?-(?P<python>[^-]+)-"
    r"(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl$"
)

SPEC_KINDS = ("current", "python", "release", "nightly_date", "nightly_prefix", "nightly", "wheel")
DEV_KINDS = ("nightly_date", "nightly_prefix", "nightly")
SPEC_FORMS = (
    "current, a release (2.13.0), a nightly (2.1.0.dev20230621 or 2.1.0.dev), nightly, "
    "a wheel (URL or path, .whl) or a path to a python"
)


def _is_date(stamp: str) -> bool:
    try:
        datetime.datetime.strptime(stamp, "%Y%m%d")
    except ValueError:
        return False
    return True


class BuildError(DiagError, ValueError):
    """A string that names no build: its message says what was expected."""


@dataclass(frozen=True)
class Version:
    """A torch version. ``dev`` is None for a release, ``""`` for a nightly series (``2.1.0.dev``),
    the digits after ``.dev`` otherwise (a nightly's date, or ``0`` in other projects' dev builds)."""

    text: str
    release: tuple[int, ...]
    pre: str = ""
    post: Optional[int] = None
    dev: Optional[str] = None
    local: Optional[str] = None

    @classmethod
    def parse(cls, text: str) -> Version:
        match = _VERSION.match(text.strip()) if isinstance(text, str) else None
        if match is None:
            raise BuildError(f"{text!r} is not a version (such as 2.13.0+cpu or 2.1.0.dev20230621)")
        dev = match["number"] if match["dev"] else None
        post = int(match["post"][5:]) if match["post"] else None
        return cls(
            text.strip(),
            tuple(int(part) for part in match["release"].split(".")),
            match["pre"] or "",
            post,
            dev,
            match["local"],
        )

    @classmethod
    def lenient(cls, text: Optional[str]) -> Optional[Version]:
        """The version, or None for what names none (``unknown``, a missing value)."""
        try:
            return cls.parse(text or "")
        except BuildError:
            return None

    @property
    def base(self) -> str:
        """Without the local label: ``2.1.0.dev20230621+cu118`` -> ``2.1.0.dev20230621``."""
        return self.text.split("+", 1)[0]

    @property
    def series(self) -> tuple[int, int]:
        """(major, minor)."""
        return self.release[0], (self.release[1] if len(self.release) > 1 else 0)

    @property
    def full_release(self) -> tuple[int, ...]:
        """The release padded to three numbers: ``2.13`` is ``2.13.0``."""
        return (self.release + (0, 0, 0))[: max(3, len(self.release))]

    @property
    def is_nightly(self) -> bool:
        return self.dev is not None

    @property
    def nightly_stamp(self) -> Optional[str]:
        """``20230621`` for a dated nightly, None otherwise (a stamp that is no date, ``20231340``, too)."""
        return self.dev if self.dev is not None and len(self.dev) == 8 and _is_date(self.dev) else None

    @property
    def nightly_date(self) -> Optional[str]:
        """``2.1.0.dev20230621+cu118`` -> ``2023-06-21``; None for anything but a dated nightly."""
        stamp = self.nightly_stamp
        return f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:]}" if stamp else None

    @property
    def variant(self) -> Optional[str]:
        """The local label when it names a wheel variant (cpu, cu121, rocm6.2, xpu), else None."""
        return self.local if self.local and _VARIANT.match(self.local) else None

    def key(self) -> tuple:
        """Sorts as torch publishes: 2.1.0.dev20230621 < 2.1.0rc1 < 2.1.0 < 2.1.0.post1 < 2.1.1 < 2.2.0.dev..."""
        if self.dev is not None:
            stage: tuple = (0, "", 0)
        elif self.pre:
            pre = _PRE.match(self.pre)
            assert pre is not None  # parse admits no other pre-release
            letter, number = pre.groups()
            stage = (1, letter, int(number))
        else:
            stage = (2, "", self.post or 0)
        return (self.full_release, stage, self.dev or "", self.text)


@dataclass(frozen=True)
class WheelName:
    """A wheel's file name, split as PEP 427 names it."""

    filename: str
    name: str
    version: Version
    python: str
    abi: str
    platform: str

    @classmethod
    def parse(cls, location: str) -> WheelName:
        """From a file name, a path or a URL (``%2B`` for ``+``, as the PyTorch index writes it)."""
        filename = urllib.parse.unquote(location.replace("\\", "/").rsplit("/", 1)[-1])
        match = _WHEEL.match(filename)
        if match is None:
            raise BuildError(f"{filename!r} is not a wheel file name (name-version-python-abi-platform.whl)")
        return cls(
            filename, match["name"], Version.parse(match["version"]), match["python"], match["abi"], match["platform"]
        )

    def tags(self) -> set[str]:
        return {
            f"{python}-{abi}-{platform}"
            for python in self.python.split(".")
            for abi in self.abi.split(".")
            for platform in self.platform.split(".")
        }


@dataclass(frozen=True)
class Spec:
    """What a ``--torch`` value asks for; ``version`` is set for releases, nightlies and wheels."""

    text: str
    kind: str
    version: Optional[Version] = None

    def __str__(self) -> str:
        return self.text

    @classmethod
    def parse(cls, text: str) -> Spec:
        if text in ("current", "nightly"):
            return cls(text, text)
        if text.endswith(".whl"):
            try:
                return cls(text, "wheel", WheelName.parse(text).version)
            except BuildError:
                return cls(text, "wheel")
        if "://" in text:
            raise BuildError(f"malformed torch spec {text!r}: a URL must name a wheel (.whl); expected {SPEC_FORMS}")
        if "/" in text or "\\" in text or Path(text).name.startswith("python"):
            return cls(text, "python")
        version = Version.lenient(text)
        if version is None or version.pre or version.post is not None or version.local is not None:
            raise BuildError(f"malformed torch spec {text!r}: expected {SPEC_FORMS}")
        if version.dev is None and len(version.release) in (2, 3):
            return cls(text, "release", version)
        if len(version.release) == 3 and version.dev == "":
            return cls(text, "nightly_prefix", version)
        if len(version.release) == 3 and version.nightly_stamp and version.dev == version.nightly_stamp:
            return cls(text, "nightly_date", version)
        if version.dev is not None and len(version.dev) == 8 and not _is_date(version.dev):
            raise BuildError(f"malformed torch spec {text!r}: {version.dev} is not a date (YYYYMMDD)")
        raise BuildError(f"malformed torch spec {text!r}: expected {SPEC_FORMS}")

    @property
    def series(self) -> Optional[tuple[int, int]]:
        """(major, minor) of the torch asked for; None for ``nightly``, interpreters and wheels."""
        return self.version.series if self.version is not None and self.kind != "wheel" else None

    def admits(self, installed: str) -> bool:
        """Does an installed ``torch.__version__`` satisfy the spec? (pip may quietly fall back to a release.)"""
        version = Version.lenient(installed)
        if self.kind in ("current", "python"):
            return True
        if version is None:
            return False
        mine = self.version
        if self.kind == "release" and mine is not None:
            return version.dev is None and not version.pre and version.full_release == mine.full_release
        if self.kind == "nightly_date":
            return version.base == self.text
        if self.kind == "nightly_prefix" and mine is not None:
            return version.nightly_stamp is not None and version.full_release == mine.full_release
        if self.kind == "nightly":
            return version.is_nightly
        return self.version is None or version.base == self.version.base


CURRENT = Spec("current", "current")  # the CLI's own interpreter
NIGHTLY = Spec("nightly", "nightly")  # the newest nightly


def nightly_spec(series: str, stamp: str) -> str:
    """The dated nightly of a series: (``2.1.0``, ``20230621``) -> ``2.1.0.dev20230621``."""
    return f"{series}.dev{stamp}"


def nightly_date(version: Optional[str]) -> Optional[str]:
    """The date of a dated nightly's version string (``2023-06-21``); None for any other string."""
    parsed = Version.lenient(version)
    return parsed.nightly_date if parsed else None


def python_request(value: str) -> Optional[tuple[int, int]]:
    """``3.10``, ``3.10.13`` or ``python3.10`` -> (3, 10); None when ``value`` is not a Python version."""
    match = _PYTHON.match(value)
    return (int(match["major"]), int(match["minor"])) if match else None


def identity(
    version: str, git_version: Optional[str], cuda_version: Optional[str], wheel: Optional[dict[str, Any]] = None
) -> TorchBuildRow:
    """A torch build as the store keeps it. Two dated nightlies of one git commit are the same build.
    ``wheel``: where its wheel came from (url, origin, sha256), when diag installed it from a wheel."""
    variant = "cpu" if not cuda_version else "cu" + cuda_version.replace(".", "")
    commit = git_version if git_version and git_version.lower() not in ("unknown", "none") else None
    wheel = wheel or {}
    return {
        "build_key": f"{commit or version}|{variant}",
        "version": version,
        "git_version": commit,
        "nightly_date": nightly_date(version),
        "variant": variant,
        "cuda_version": cuda_version,
        "wheel_url": wheel.get("url"),
        "wheel_origin": wheel.get("origin"),
        "wheel_sha256": wheel.get("sha256"),
    }


_UNKNOWN = ((0, 0, 0), (0, "", 0), "", "")


def order(build: Mapping[str, Any]) -> tuple:
    """Stored builds in one order (``Version.key``), then by nightly date and id; an unknown version first."""
    version = Version.lenient(build.get("version"))
    return (*(version.key() if version else _UNKNOWN), build.get("nightly_date") or "", build.get("id") or 0)


def version_key(text: str) -> tuple:
    """``Version.key`` of a version string; what names no version sorts first."""
    version = Version.lenient(text)
    return version.key() if version else _UNKNOWN
