"""torch wheels: where a build's wheel is (local folders, the wheel cache, the index listing, its
direct URL), fetching it into the cache, and its sha256.

The PyTorch nightly index lists about two months of nightlies; an older nightly's wheel is
still served at its direct URL, ``<index>/torch-<version>%2B<variant>-<python tag>-<abi>-<platform>.whl``.
A wheel fetched once is kept under ``$DIAG_HOME/wheels`` (bounded by ``DIAG_WHEEL_CACHE_MB``,
least recently used out first) and reused by every environment; its sha256 is recorded with
the build, so that the build can be installed again and checked.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Iterable, Optional

from diag.build import BuildError, WheelName
from diag.config import diag_home
from diag.errors import DiagError

DEFAULT_CACHE_MB = 20_000
TIMEOUT_S = 60
# Platform tags the PyTorch indexes have used for Linux wheels, newest naming first.
INDEX_PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux2014_x86_64",
    "linux_x86_64",
    "manylinux_2_28_aarch64",
    "manylinux2014_aarch64",
    "linux_aarch64",
    "macosx_11_0_arm64",
    "win_amd64",
)


class WheelError(DiagError):
    pass


@dataclass(frozen=True)
class Wheel:
    filename: str
    location: str  # a URL or a path
    origin: str  # given | find-links | wheel cache | index | direct URL
    sha256: Optional[str] = None  # the digest the index gave with its link (#sha256=...), where it gave one

    @property
    def name(self) -> WheelName:
        try:
            return WheelName.parse(self.filename)
        except BuildError as exc:
            raise WheelError(str(exc)) from exc

    @property
    def version(self) -> str:
        """The version with its local label (2.1.0.dev20230621+cpu)."""
        return self.name.version.text

    @property
    def base_version(self) -> str:
        return self.name.version.base

    @property
    def label(self) -> Optional[str]:
        return self.name.version.local

    def tags(self) -> set[str]:
        return self.name.tags()

    @property
    def is_url(self) -> bool:
        return "://" in self.location and not self.location.startswith("file://")


def cached_wheels() -> list[Wheel]:
    """The wheels of the wheel cache. A file there that is no whole wheel (an error page an older
    diag kept as one) is removed, so that the build is fetched again rather than failing each time."""
    found = []
    for wheel in local_wheels([cache_dir()], "wheel cache"):
        if _not_whole(Path(wheel.location), False) is None:
            found.append(wheel)
        else:
            _drop(Path(wheel.location))
    return found


def is_wheel_name(filename: str) -> bool:
    try:
        WheelName.parse(filename)
    except BuildError:
        return False
    return True


def cache_dir() -> Path:
    return diag_home() / "wheels"


def cache_limit_mb() -> float:
    try:
        return float(os.environ.get("DIAG_WHEEL_CACHE_MB", DEFAULT_CACHE_MB))
    except ValueError:
        return DEFAULT_CACHE_MB


_TAGS = (
    "import json\ntry:\n    from pip._vendor.packaging import tags\n"
    "except ImportError:\n    from packaging import tags\n"
    "print(json.dumps([str(t) for t in tags.sys_tags()]))"
)


def supported_tags(python: str) -> list[str]:
    """The wheel tags ``python`` installs, best first (from the packaging library pip carries)."""
    done = subprocess.run([python, "-c", _TAGS], capture_output=True, text=True, timeout=120)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError) as exc:
        raise WheelError(f"cannot read the wheel tags of {python}: {done.stderr.strip()[-300:]}") from exc


def local_wheels(folders: Iterable[Path], origin: str) -> list[Wheel]:
    found = []
    for folder in folders:
        if folder.is_dir():  # a regular file only: opening a FIFO named like a wheel would block
            found += [Wheel(p.name, str(p), origin) for p in sorted(folder.glob("torch-*.whl")) if p.is_file()]
    return found


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "a" and dict(attrs).get("href"):
            self.hrefs.append(dict(attrs)["href"])


def project_page(index_url: str) -> str:
    url = index_url.rstrip("/") + "/torch/"
    if url.startswith("file://") and Path(urllib.parse.unquote(url[7:])).is_dir():
        url += "index.html"
    return url


def listed_wheels(index_url: str) -> list[Wheel]:
    """torch wheels a PEP 503 simple index lists. WheelError when the page cannot be read."""
    url = project_page(index_url)
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            page = response.read().decode("utf-8", "replace")
    except (OSError, ValueError) as exc:
        raise WheelError(f"cannot read the torch index {url}: {exc}") from exc
    parser = _Links()
    parser.feed(page)
    found = []
    for href in parser.hrefs:
        target, _, fragment = urllib.parse.urljoin(url, href).partition("#")
        name = target.rsplit("/", 1)[-1]
        digest = fragment[len("sha256=") :].lower() if fragment.startswith("sha256=") else None
        if name.startswith("torch-") and is_wheel_name(name):
            found.append(Wheel(urllib.parse.unquote(name), target, "index", digest))
    return found


def direct_urls(index_url: str, version: str, variant: Optional[str], tags: list[str]) -> list[str]:
    """Where the index serves ``version``'s wheel for these tags, listed or not."""
    label = f"+{variant}" if variant else ""
    python_tag = next((t.split("-")[0] for t in tags if t.startswith("cp")), None)
    if python_tag is None:
        return []
    platforms = [p for p in INDEX_PLATFORMS if f"{python_tag}-{python_tag}-{p}" in tags]
    quoted = urllib.parse.quote(f"{version}{label}")
    return [
        f"{index_url.rstrip('/')}/torch-{quoted}-{python_tag}-{python_tag}-{platform}.whl" for platform in platforms
    ]


def exists(url: str) -> bool:
    """Does ``url`` serve a file? (a HEAD request; a file:// URL is looked up on disk)."""
    if url.startswith("file://"):
        return Path(urllib.parse.unquote(url[7:])).is_file()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=TIMEOUT_S) as response:
            return 200 <= response.status < 300
    except urllib.error.HTTPError:
        return False
    except (OSError, ValueError) as exc:
        raise WheelError(f"cannot reach {url}: {exc}") from exc


def sha256_of(path: Path) -> str:
    """The file's sha256; read once per process while the file is unchanged (a torch wheel is GBs, and
    a cached one is checked before it is chosen and hashed again when it is taken)."""
    seen = path.stat()
    key = (str(path.resolve()), seen.st_size, seen.st_mtime_ns, seen.st_ino)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


_DIGESTS: dict[tuple[str, int, int, int], str] = {}


def fetch(wheel: Wheel) -> tuple[Path, str]:
    """The wheel as a local file and its sha256: a URL is downloaded into the wheel cache once."""
    if not wheel.is_url:
        location = wheel.location[7:] if wheel.location.startswith("file://") else wheel.location
        path = Path(urllib.parse.unquote(location))
        if not path.is_file():
            raise WheelError(f"no wheel at {path}")
        digest = sha256_of(path)
        os.utime(path)  # recently used: the cache keeps it longest
        return path, digest
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / wheel.filename
    if target.is_file() and still_whole(target, wheel.sha256):
        digest = sha256_of(target)  # as still_whole read it
        os.utime(target)
        return target, digest
    partial = target.with_name(f".{target.name}.{os.getpid()}.part")
    hashed = hashlib.sha256()
    try:
        with urllib.request.urlopen(wheel.location, timeout=TIMEOUT_S) as response, open(partial, "wb") as out:
            for block in iter(lambda: response.read(1 << 20), b""):
                hashed.update(block)
                out.write(block)
        why = _not_whole(partial, True, hashed.hexdigest(), wheel.sha256)
        if why is not None:
            raise WheelError(f"{wheel.location} did not serve a wheel: {why}; nothing was kept")
        os.replace(partial, target)
        _recorded(target).write_text(hashed.hexdigest() + "\n", encoding="ascii")
    except (OSError, ValueError) as exc:
        raise WheelError(f"downloading {wheel.location} failed: {exc}") from exc
    finally:
        partial.unlink(missing_ok=True)
    evict(keep=target)
    return target, hashed.hexdigest()


def _recorded(path: Path) -> Path:
    """Beside a cached wheel, the sha256 it had when it was downloaded whole (every member checked)."""
    return path.with_name(path.name + ".sha256")


def still_whole(path: Path, expected: Optional[str] = None) -> bool:
    """Is the cached wheel at ``path`` what was downloaded? Its sha256 is the one recorded then (and
    the index's, where it gave one); one an older diag cached, with none recorded, has every member
    checked once and its sha256 recorded. One that is not is removed, to be fetched again."""
    digest = sha256_of(path)
    try:
        recorded: Optional[str] = _recorded(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        recorded = None
    if recorded is not None:
        whole = recorded == digest and (not expected or digest == expected)
    else:
        whole = _not_whole(path, True, digest, expected) is None
        if whole:
            _recorded(path).write_text(digest + "\n", encoding="ascii")
    if not whole:
        _drop(path)
    return whole


def _drop(path: Path) -> None:
    path.unlink(missing_ok=True)
    _recorded(path).unlink(missing_ok=True)


def _not_whole(
    path: Path, check_members: bool, digest: Optional[str] = None, expected: Optional[str] = None
) -> Optional[str]:
    """Why the file at ``path`` is not a whole wheel, or None: a zip archive with a ``.dist-info/WHEEL``
    (with ``check_members``, every member's CRC read too), whose sha256 is the one the index gave."""
    if expected and digest != expected:
        return f"its sha256 is {digest}, the index gave {expected}"
    try:
        with zipfile.ZipFile(path) as archive:
            if not any(name.endswith(".dist-info/WHEEL") for name in archive.namelist()):
                return "the zip archive has no .dist-info/WHEEL"
            broken = archive.testzip() if check_members else None
    except (zipfile.BadZipFile, OSError) as exc:
        with open(path, "rb") as handle:
            start = handle.read(40)
        return f"{path.stat().st_size} bytes that are no zip archive ({exc}), starting {start!r}"
    return f"member {broken} is damaged" if broken else None


def evict(keep: Optional[Path] = None, limit_mb: Optional[float] = None) -> list[Path]:
    """Remove the least recently used wheels until the cache fits its limit; ``keep`` stays."""
    limit = (cache_limit_mb() if limit_mb is None else limit_mb) * 2**20
    folder = cache_dir()
    files = sorted((p for p in folder.glob("*.whl") if p.is_file()), key=lambda p: p.stat().st_mtime)
    total = sum(p.stat().st_size for p in files)
    removed = []
    for path in files:
        if total <= limit:
            break
        if keep is not None and path == keep:
            continue
        total -= path.stat().st_size
        _drop(path)
        removed.append(path)
    return removed
