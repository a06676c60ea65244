"""A PyTorch-like nightly index on 127.0.0.1, for testing the nightly path offline.

The real nightly index cannot be reached from the test machines. This serves
``<root>/nightly/cpu/torch/index.html`` (PEP 503) listing only the newest nightlies, and every
wheel file at its direct URL ``<root>/nightly/cpu/<file>``, listed or not, as
download.pytorch.org does once a nightly has dropped off the listing.

Wheels are either real (``relabel``: the torch release wheel on this machine rewritten as a
dated nightly: its dist-info, METADATA, RECORD and torch/version.py, with a distinct fake git
commit each, optionally patched so that dynamo's VariableBuilder raises the 2023 nightlies'
``guards`` TypeError) or tiny stand-ins (``stand_in``) for tests that never install them.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

GUARDS_PATCH = """

# Added by diag's tests: behave like the mid-2023 nightlies whose builder lost its guards argument.
def _diag_broken_init(self, *args, **kwargs):
    raise TypeError("VariableBuilder.__init__() got an unexpected keyword argument 'guards'")


VariableBuilder.__init__ = _diag_broken_init
"""
BUILDER = "torch/_dynamo/variables/builder.py"

BREAK_BEFORE_ATTENTION = """

# Added by diag's tests: a dynamo that breaks the graph at each scaled_dot_product_attention, with the
# graph-break id of torch's own registry for a deliberate break (GB4636), as a nightly might add one.
_diag_call_function = TorchInGraphFunctionVariable.call_function


def _diag_breaking_call(self, tx, args, kwargs):
    if getattr(self.value, "__name__", "") == "scaled_dot_product_attention":
        from torch._dynamo.exc import unimplemented

        unimplemented(
            gb_type="Call to `torch._dynamo.step_unsupported()`",
            context="diag's tests",
            explanation="a break before attention, as a nightly might add one",
            hints=[],
        )
    return _diag_call_function(self, tx, args, kwargs)


TorchInGraphFunctionVariable.call_function = _diag_breaking_call
"""
TORCH_FUNCTIONS = "torch/_dynamo/variables/torch.py"


def release_wheel(folder: Path, version: str = "2.13.0") -> Path:
    """The torch release wheel pip has on this machine, downloaded (without dependencies) into ``folder``."""
    found = sorted(folder.glob(f"torch-{version}*.whl"))
    if not found:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--disable-pip-version-check",
                f"torch=={version}",
                "-d",
                str(folder),
            ],
            check=True,
            capture_output=True,
        )
        found = sorted(folder.glob(f"torch-{version}*.whl"))
    return found[0]


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def relabel(
    source: Path, version: str, out_dir: Path, patch_guards: bool = False, patch_attention: bool = False
) -> Path:
    """``source`` rewritten as torch ``version`` (e.g. 2.14.0.dev20260101+cpu), stored uncompressed;
    ``patch_guards``: with the 2023 nightlies' ``guards`` TypeError; ``patch_attention``: breaking the
    graph at attention (BREAK_BEFORE_ATTENTION)."""
    patches = {
        BUILDER: GUARDS_PATCH if patch_guards else "",
        TORCH_FUNCTIONS: BREAK_BEFORE_ATTENTION if patch_attention else "",
    }
    with zipfile.ZipFile(source) as wheel:
        names = wheel.namelist()
        old_info = next(n.split("/", 1)[0] for n in names if n.endswith(".dist-info/METADATA"))
        old_version = old_info[len("torch-") : -len(".dist-info")]
        new_info = f"torch-{version}.dist-info"
        commit = hashlib.sha1(version.encode()).hexdigest()
        target = out_dir / source.name.replace(old_version, version, 1)
        record_lines = []
        with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as out:
            for name in names:
                new_name = name.replace(old_info, new_info, 1)
                if name == f"{old_info}/RECORD":
                    continue
                data = wheel.read(name)
                if name == f"{old_info}/METADATA":
                    data = data.replace(f"Version: {old_version}".encode(), f"Version: {version}".encode(), 1)
                elif name == "torch/version.py":
                    text = data.decode()
                    lines = []
                    for line in text.splitlines():
                        if line.startswith("__version__"):
                            line = f"__version__ = '{version}'"
                        elif line.startswith("git_version"):
                            line = f"git_version = '{commit}'"
                        lines.append(line)
                    data = ("\n".join(lines) + "\n").encode()
                elif patches.get(name):
                    data += patches[name].encode()
                out.writestr(zipfile.ZipInfo(new_name, date_time=wheel.getinfo(name).date_time), data)
                record_lines.append(f"{new_name},{_record_hash(data)},{len(data)}")
            record_lines.append(f"{new_info}/RECORD,,")
            out.writestr(f"{new_info}/RECORD", "\n".join(record_lines) + "\n")
    return target


def stand_in(version: str, out_dir: Path, platform: str = "linux_x86_64", python_tag: str = "") -> Path:
    """A tiny wheel with a torch wheel's name (never installed), for resolution tests."""
    python_tag = python_tag or f"cp{sys.version_info[0]}{sys.version_info[1]}"
    path = out_dir / f"torch-{version}-{python_tag}-{python_tag}-{platform}.whl"
    info = f"torch-{version.split('+')[0]}.dist-info"
    with zipfile.ZipFile(path, "w") as out:
        out.writestr(f"{info}/METADATA", f"Name: torch\nVersion: {version}\n")
        out.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n")
    return path


def write_listing(root: Path, variant: str, listed: list[Path]) -> str:
    """``root/nightly/<variant>/torch/index.html`` listing ``listed`` (files in ``root/nightly/<variant>``)."""
    folder = root / "nightly" / variant / "torch"
    folder.mkdir(parents=True, exist_ok=True)
    links = "".join(f'<a href="/nightly/{variant}/{p.name.replace("+", "%2B")}">{p.name}</a><br>\n' for p in listed)
    (folder / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    return f"nightly/{variant}"


def stand_ins(root: Path, days: tuple[int, ...], listed: tuple[int, ...]) -> dict[int, Path]:
    """Stand-ins of 2.14.0.dev202601<day> under ``root/nightly/cpu``, the listing naming ``listed``."""
    files = root / "nightly" / "cpu"
    files.mkdir(parents=True)
    made = {day: stand_in(f"2.14.0.dev202601{day:02d}+cpu", files) for day in days}
    write_listing(root, "cpu", [made[day] for day in listed])
    return made


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # the stdlib's name
        pass


class Server:
    """A static HTTP server for ``root`` on 127.0.0.1 (a free port), in a thread; ``handler``
    answers each request (a subclass of ``QuietHandler`` that serves some addresses otherwise)."""

    def __init__(self, root: Path, handler: type[QuietHandler] = QuietHandler) -> None:
        handler = functools.partial(handler, directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "Server":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
