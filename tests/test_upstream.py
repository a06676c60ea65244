"""diag file-upstream: a draft issue for a graph break, and the tracker searched for its GB id before
anything is filed. The tracker is a stand-in of GitHub's REST API served on 127.0.0.1 (the real one
is never called from tests)."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.parse
from typing import Optional

import pytest
from conftest import diag_here

from diag import store


class Tracker:
    """``GET /search/issues`` and ``POST /repos/<repo>/issues``, with the requests it got."""

    def __init__(self, issues: list[dict]) -> None:
        self.issues, self.requests = issues, []
        self.answer: Optional[object] = None  # set: what every request is answered with instead
        tracker = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format, *args):  # the stdlib's name
                pass

            def _reply(self, payload: dict, code: int = 200) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # the stdlib's name
                url = urllib.parse.urlparse(self.path)
                tracker.requests.append(("GET", url.path, dict(self.headers), urllib.parse.parse_qs(url.query)))
                if tracker.answer is not None:
                    return self._reply(tracker.answer)
                query = urllib.parse.parse_qs(url.query)["q"][0]
                term = query.split('"')[1]
                items = [issue for issue in tracker.issues if term in issue["title"] + issue["body"]]
                self._reply({"total_count": len(items), "items": items})

            def do_POST(self):  # the stdlib's name
                sent = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                tracker.requests.append(("POST", self.path, dict(self.headers), sent))
                if tracker.answer is not None:
                    return self._reply(tracker.answer, 201)
                if self.path.endswith("/comments"):
                    return self._reply(
                        {"id": len(tracker.requests), "html_url": f"https://tracker.test{self.path}"}, 201
                    )
                made = {"number": 9000 + len(tracker.issues), "state": "open", **sent}
                made["html_url"] = f"https://tracker.test/issues/{made['number']}"
                tracker.issues.append(made)
                self._reply(made, 201)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def tracker():
    made = Tracker([])
    yield made
    made.close()


def _gb_run(db_path) -> int:
    """dynamic_slice without fullgraph on the nightly: its .item() break, GB0124."""
    (run_id,) = (
        store.open_db(db_path)
        .execute(
            """SELECT max(r.id) FROM runs r JOIN torch_builds b ON b.id = r.torch_build_id
               WHERE r."case" = 'dynamic_slice' AND r.fullgraph = 0 AND b.nightly_date IS NOT NULL"""
        )
        .fetchone()
    )
    return run_id


def _file(db_path, tmp_path, tracker, *extra: str) -> dict:
    done = diag_here(
        "file-upstream",
        str(_gb_run(db_path)),
        "--db",
        str(db_path),
        "--api-url",
        tracker.url,
        "--json",
        *extra,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_without_a_token_the_draft_is_printed_and_nothing_is_sent(recorded_db, tmp_path, tracker, monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    drafted = _file(recorded_db, tmp_path, tracker)
    assert drafted["gb_id"] == "GB0124" and drafted["existing"] is None and drafted["filed"] is None
    assert drafted["title"] == "[dynamo] GB0124: Unsupported Tensor.item() call with capture_scalar_outputs=False"
    body = drafted["body"]
    for needed in ("2.14.0.dev20260101+cpu", "gb/gb0124.html", "### What torch says", "```python", "torch.compile("):
        assert needed in body, needed
    assert tracker.requests == []
    done = diag_here("file-upstream", str(_gb_run(recorded_db)), "--db", str(recorded_db), "--file", cwd=tmp_path)
    assert done.returncode == 1 and "--file needs a token in $GITHUB_TOKEN" in done.stderr


def test_a_break_already_reported_is_linked_not_filed_again(recorded_db, tmp_path, tracker, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "t0ken")
    tracker.issues.append(
        {
            "number": 120,
            "title": "item() breaks the graph (GB0124)",
            "body": "",
            "state": "open",
            "html_url": "https://tracker.test/issues/120",
        }
    )
    found = _file(recorded_db, tmp_path, tracker, "--file")
    assert [issue["number"] for issue in found["existing"]] == [120] and found["filed"] is None
    (request,) = tracker.requests
    assert request[0] == "GET" and '"GB0124" repo:pytorch/pytorch is:issue' in request[3]["q"][0]
    assert request[2]["Authorization"] == "Bearer t0ken"


def test_a_new_break_is_filed_once_with_the_draft(recorded_db, tmp_path, tracker, monkeypatch):
    monkeypatch.setenv("MY_TOKEN", "t0ken")
    found = _file(recorded_db, tmp_path, tracker, "--file", "--token-env", "MY_TOKEN", "--repo", "me/torch")
    assert found["existing"] == [] and found["filed"]["html_url"] == "https://tracker.test/issues/9000"
    methods = [(method, path) for method, path, *_ in tracker.requests]
    assert methods == [("GET", "/search/issues"), ("POST", "/repos/me/torch/issues")]
    posted = tracker.requests[1][3]
    assert posted["title"] == found["title"] and posted["body"] == found["body"]
    # filed now: the next run of the same break finds it
    again = _file(recorded_db, tmp_path, tracker, "--file", "--token-env", "MY_TOKEN", "--repo", "me/torch")
    assert [issue["number"] for issue in again["existing"]] == [9000] and again["filed"] is None


def test_a_run_without_the_asked_break_is_one_line(recorded_db, tmp_path):
    done = diag_here(
        "file-upstream", str(_gb_run(recorded_db)), "--db", str(recorded_db), "--break", "nope", cwd=tmp_path
    )
    assert done.returncode == 1 and "has no finding 'nope'; it has: GB0124, GB0219" in done.stderr
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize("answer", [[], {}, {"items": "x"}, {"items": [1]}, "ok", 3])
def test_a_tracker_that_answers_something_else_is_one_line(recorded_db, tmp_path, tracker, monkeypatch, answer):
    """A tracker (or a proxy before it) that answers JSON of another shape: one line naming what it
    answered, and nothing filed on a guess."""
    monkeypatch.setenv("GITHUB_TOKEN", "t0ken")
    tracker.answer = answer
    done = diag_here(
        "file-upstream", str(_gb_run(recorded_db)), "--db", str(recorded_db), "--api-url", tracker.url, "--file",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "the tracker answered" in done.stderr and "not a search result" in done.stderr
    assert [method for method, *_ in tracker.requests] == ["GET"]


def test_each_cause_is_filed_once_at_its_owner_s_tracker_and_commented_on_night_after_night(
    tmp_path, tracker, monkeypatch
):
    """The synthetic night of tests/test_causes.py: a torch cause and a transformers cause. Filed, each
    at its owner's tracker; the night replayed: each found again by its marker and commented on."""
    from test_causes import _night

    db = str(tmp_path / "night.db")
    _night(db, 1)
    monkeypatch.setenv("GITHUB_TOKEN", "t")
    args = ("file-upstream", "--causes", "--db", db, "--api-url", tracker.url, "--file", "--json")
    first = json.loads(diag_here(*args, cwd=tmp_path).stdout)
    filed = [(r[1], r[3]["title"]) for r in tracker.requests if r[0] == "POST"]
    assert [path for path, _ in filed] == ["/repos/pytorch/pytorch/issues", "/repos/huggingface/transformers/issues"]
    assert [d["filed"]["number"] for d in first] == [9000, 9001] and all(d["commented"] is None for d in first)
    _night(db, 2)
    tracker.requests.clear()
    again = json.loads(diag_here(*args, cwd=tmp_path).stdout)
    posts = [r[1] for r in tracker.requests if r[0] == "POST"]
    assert posts == [
        "/repos/pytorch/pytorch/issues/9000/comments",
        "/repos/huggingface/transformers/issues/9001/comments",
    ]
    assert [d["filed"] for d in again] == [None, None] and len(tracker.issues) == 2
