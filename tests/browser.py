"""Pages in a real browser: Debian's headless Chromium, run as a subprocess.

``measure`` loads a page in an iframe of an exact size (a headless window is at least 500 px
wide; the iframe is not) and returns what a script measured there, as JSON read from the DOM.
``screenshot`` saves what a window of a given size shows.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _run(args: list[str], profile: Path) -> subprocess.CompletedProcess:
    assert CHROMIUM, "chromium is not installed"
    done = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def console_errors(page: Path, screenshot: Path, profile: Path) -> list[str]:
    """The page's console errors (uncaught exceptions, failed loads), with a screenshot taken."""
    done = _run(
        ["--enable-logging=stderr", "--v=0", "--window-size=1400,1000", f"--screenshot={screenshot}", page.as_uri()],
        profile,
    )
    return [line for line in done.stderr.splitlines() if "CONSOLE" in line and ("Error" in line or "Uncaught" in line)]


def dom(url: str, profile: Path) -> str:
    """The document at ``url`` (an http address) once its scripts have run and any navigation they
    made has loaded: Chromium's --dump-dom, with virtual time to run them in."""
    return _run(["--virtual-time-budget=5000", "--dump-dom", url], profile).stdout


def measure(page: Path, width: int, height: int, script: str, work: Path, fragment: str = "") -> Any:
    """Load ``page`` (with ``fragment``, as ``#filter=crash``) in a ``width`` x ``height`` frame;
    ``script`` is a JS function body over ``w`` (the page's window) and ``d`` (its document) that
    returns what to measure."""
    work.mkdir(parents=True, exist_ok=True)
    wrapper = work / f"measure-{width}.html"
    wrapper.write_text(
        f"""<!doctype html><html><body style="margin:0">
<iframe id="frame" src="{page.as_uri()}{fragment}" style="width:{width}px;height:{height}px;border:0"></iframe>
<script>
document.getElementById("frame").addEventListener("load", function () {{
  var w = this.contentWindow, d = this.contentDocument, out = document.createElement("pre");
  try {{ out.textContent = JSON.stringify((function (w, d) {{ {script} }})(w, d)); }}
  catch (e) {{ out.textContent = JSON.stringify({{"__failed__": String(e)}}); }}
  out.id = "measured"; document.body.appendChild(out);
}});
</script></body></html>""",
        encoding="utf-8",
    )
    done = _run(
        [
            "--allow-file-access-from-files",
            f"--window-size={max(width, 500) + 20},{height + 40}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            wrapper.as_uri(),
        ],
        work / f"profile-{width}",
    )
    found = re.search(r'<pre id="measured">(.*?)</pre>', done.stdout, re.S)
    assert found, done.stdout[-2000:]
    result = json.loads(found.group(1).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
    assert not (isinstance(result, dict) and "__failed__" in result), result
    return result


def screenshot(page: Path, width: int, height: int, target: Path, profile: Path) -> Path:
    _run([f"--window-size={width},{height}", f"--screenshot={target}", page.as_uri()], profile)
    return target
