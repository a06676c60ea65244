"""``diag file-upstream``: an upstream issue for a graph break, drafted from a stored run, and the
tracker searched for its GB id first, so that a break already reported is linked, not filed again;
with ``--causes``, one issue per cause of the newest build (``check``'s), at its owner's tracker,
found again night after night by the cause's marker and commented on, never filed twice.

The tracker is GitHub's REST API (``/search/issues``, ``/repos/{repo}/issues``), at any base URL
(GitHub Enterprise, or a stand-in in tests). Nothing is sent without a token; nothing is filed
without ``--file``.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from diag.contract import graph_break_id
from diag.errors import DiagError
from diag.store.typed import StoredRun

API = "https://api.github.com"
REPO = "pytorch/pytorch"
REGISTRY = "https://meta-pytorch.github.io/compile-graph-break-site/gb/{id}.html"
MAX_BODY = 60_000  # GitHub refuses an issue body over 65,536 characters
EXCERPT_LINES = 30


class UpstreamError(DiagError):
    pass


@dataclass
class Finding:
    key: str
    text: str  # the message as torch worded it
    gb_id: Optional[str]
    location: Optional[str]
    name: Optional[str] = None  # the line that names the break (gb_type, torch >= 2.7)

    @property
    def headline(self) -> str:
        return self.name or next((line.strip() for line in self.text.splitlines() if line.strip()), self.key)


def findings(run: StoredRun) -> list[Finding]:
    """The run's graph breaks, then its compile error: what an upstream issue can be about."""
    found = []
    for gb in run.get("graph_breaks") or []:
        if key := gb.get("key"):
            said = gb.get("reason") or ""
            gb_id = graph_break_id(said) or gb_id_of_key(key)
            found.append(Finding(key, said, gb_id, gb.get("location"), gb.get("gb_type")))
    if (key := run.get("error_key")) and run.get("error_message"):
        message = f"{run.get('error_type') or 'Error'}: {run['error_message']}"
        gb_id = graph_break_id(message) or gb_id_of_key(key)
        found.append(Finding(key, message, gb_id, run.get("error_location")))
    unique: dict[str, Finding] = {}
    for finding in found:
        unique.setdefault(finding.key, finding)
    return list(unique.values())


def gb_id_of_key(key: str) -> Optional[str]:
    """The key itself where a finding is keyed by its GB id (diag/probe/keys.py), else None."""
    return key if re.fullmatch(r"GB\d{4}", key) else None


def registry_url(gb_id: str) -> str:
    """torch's registry entry for a graph-break id."""
    return REGISTRY.format(id=gb_id.lower())


def choose(run: StoredRun, key: Optional[str]) -> Finding:
    found = findings(run)
    if not found:
        raise UpstreamError(f"run #{run['id']} recorded no graph break and no compile error: nothing to report")
    if key is None:
        return next((f for f in found if f.gb_id), found[0])
    for finding in found:
        if finding.key == key:
            return finding
    raise UpstreamError(f"run #{run['id']} has no finding {key!r}; it has: {', '.join(f.key for f in found)}")


def excerpt(run: StoredRun, finding: Finding) -> str:
    """The lines of the run's DEBUG log around the first mention of the finding."""
    log = Path(run.get("artifacts_dir") or "") / "torch_debug.log"
    needles = [n for n in (finding.gb_id, (finding.text.splitlines() or [""])[0].strip()) if n]
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    for number, line in enumerate(lines):
        if any(needle in line for needle in needles):
            start = max(0, number - 5)
            return "\n".join(lines[start : start + EXCERPT_LINES])
    return ""


def draft(run: StoredRun, finding: Finding, repro_source: Optional[str], log_excerpt: str) -> tuple[str, str]:
    """(title, body) of the issue."""
    title = f"[dynamo] {finding.gb_id or finding.key}: {finding.headline}"[:200]
    version = run.get("build_version") or run.get("torch_version") or "unknown"
    lines = [
        f"torch.compile hits {'graph break ' + finding.gb_id if finding.gb_id else 'this failure'} in a decode step "
        f"(`{run['case']}`, backend `{run['backend']}`, fullgraph={bool(run['fullgraph'])}).",
        "",
        f"- torch: `{version}` (git `{run.get('build_git_version') or 'unknown'}`)",
        f"- transformers: `{run.get('transformers_version') or 'not installed'}`; Python `{run.get('python') or '?'}`; "
        f"`{run.get('platform') or '?'}`",
        f"- status: `{run['status']}`" + (f"; where: `{finding.location}`" if finding.location else ""),
    ]
    if finding.gb_id:
        lines.append(f"- graph break {finding.gb_id}: {registry_url(finding.gb_id)}")
    lines += ["", "### What torch says", "", "```", finding.text.strip()[:6000], "```"]
    if log_excerpt:
        lines += ["", "### The DEBUG log around it", "", "```", log_excerpt[:8000], "```"]
    tail = ["", "Found and recorded by diag; `diag show` has the whole run."]
    body = "\n".join(lines)
    if repro_source:
        block = "\n".join(
            [
                "",
                "### Repro",
                "",
                "<details><summary>repro.py (torch and transformers only)</summary>",
                "",
                "```python",
                repro_source,
                "```",
                "</details>",
            ]
        )
        if len(body) + len(block) + 200 < MAX_BODY:
            body += block
        else:
            body += f"\n\n### Repro\n\nToo long for the issue body: attach `diag repro {run['id']} -o repro.py`."
    return title, body + "\n".join(tail)


def _call(url: str, token: str, data: Optional[dict] = None) -> Any:
    import urllib.error  # here, not at the top: with http and ssl, a fifth of `diag report`'s imports
    import urllib.request

    request = urllib.request.Request(
        url,
        data=None if data is None else json.dumps(data).encode(),
        method="GET" if data is None else "POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "Content-Type": "application/json",
            "User-Agent": "diag",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        raise UpstreamError(f"{request.method} {url}: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise UpstreamError(f"{request.method} {url}: {getattr(exc, 'reason', exc)}") from exc


def search(api: str, repo: str, token: str, finding: Finding) -> list[dict[str, Any]]:
    """Issues (open or closed) of ``repo`` that name the finding's GB id, or its first line."""
    term = finding.gb_id or finding.headline[:120]
    query = urllib.parse.quote(f'"{term}" repo:{repo} is:issue')
    url = f"{api.rstrip('/')}/search/issues?q={query}"
    found = _call(url, token)
    items = found.get("items") if isinstance(found, dict) else None
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise UpstreamError(f"GET {url}: the tracker answered {_shape(found)}, not a search result (items)")
    return [{k: item.get(k) for k in ISSUE_FIELDS} for item in items]


def create(api: str, repo: str, token: str, title: str, body: str) -> dict[str, Any]:
    url = f"{api.rstrip('/')}/repos/{repo}/issues"
    made = _call(url, token, {"title": title, "body": body})
    if not isinstance(made, dict) or "number" not in made:
        raise UpstreamError(f"POST {url}: the tracker answered {_shape(made)}, not the issue it filed")
    return {k: made.get(k) for k in ISSUE_FIELDS}


ISSUE_FIELDS = ("number", "title", "html_url", "state")


def comment(api: str, repo: str, token: str, number: int, body: str) -> dict[str, Any]:
    url = f"{api.rstrip('/')}/repos/{repo}/issues/{number}/comments"
    made = _call(url, token, {"body": body})
    if not isinstance(made, dict) or "id" not in made:
        raise UpstreamError(f"POST {url}: the tracker answered {_shape(made)}, not the comment it made")
    return {"id": made.get("id"), "html_url": made.get("html_url")}


def search_text(api: str, repo: str, token: str, text: str) -> list[dict[str, Any]]:
    """Issues (open or closed) of ``repo`` whose title or body holds ``text`` (a cause's marker)."""
    return search(api, repo, token, Finding(text, text, None, None, text))


def per_cause(
    alerts: list[dict[str, Any]], api: str, token: Optional[str], file_it: bool, repo: Optional[str] = None
) -> list[dict[str, Any]]:
    """What was done for each cause's alert (``gate.alerts``): where it goes (its owner's tracker, or
    ``repo`` for all), the issues that carry its marker, and with ``file_it`` the comment added to
    the first of them or the issue filed. The case's own bugs go nowhere: said, not filed."""
    done = []
    for alert in alerts:
        where = repo or alert.get("tracker")
        said: dict[str, Any] = {"marker": alert["marker"], "title": alert["title"], "owner": alert["owner"]}
        said |= {"repo": where, "existing": None, "filed": None, "commented": None}
        if where is None:
            done.append(said | {"skipped": "the case's own code: the user's bug, nothing to file upstream"})
            continue
        if token is None:
            done.append(said | {"skipped": "no token: the draft only"})
            continue
        said["existing"] = search_text(api, where, token, alert["marker"])
        if file_it and said["existing"]:
            said["commented"] = comment(api, where, token, said["existing"][0]["number"], alert["body"])
        elif file_it:
            said["filed"] = create(api, where, token, alert["title"], alert["body"])
        done.append(said)
    return done


def _shape(answer: Any) -> str:
    """What a tracker answered, briefly: a JSON value of the wrong kind is named by its kind and start."""
    return f"{type(answer).__name__} {json.dumps(answer)[:60]}"
