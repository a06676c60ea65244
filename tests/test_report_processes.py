"""``diag report --processes``: the pages of runs rendered by a forked helper give the site that one
process gives, byte for byte; a helper that fails leaves the parent to render them; no helper is
forked beside other threads or for a re-render. And the command line imports only the module of the
command it runs."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import diag, site_files

from diag import report, store
from diag.report import forked

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import synthetic  # after sys.path names bench/

NIGHTS = 4  # x 96 configs: every run of them is detailed, more than forked.FORK_AT
PAGES = NIGHTS * len({config["case"] for config in synthetic.configs()})  # a page per case and build

# Renders argv[1] into argv[2] with --processes argv[3] and prints what each helper returned (the
# number of pages, or null where the parent rendered them itself). argv[4] "fail": the helper
# cannot open the DB (only the helper opens one during a render).
RENDER = """
import json, sys
from pathlib import Path
from diag import report, store
from diag.report import forked

returned = []
original = forked.Helper.result
def result(self):
    found = original(self)
    returned.append(None if found is None else len(found))
    return found
forked.Helper.result = result
db = store.open_db(sys.argv[1], readonly=True)
if sys.argv[4] == "fail":
    def refuse(*args, **kwargs):
        raise store.StoreError("the helper cannot open the DB")
    store.open_db = refuse
out = Path(sys.argv[2])
site = report.Site(out, Path(sys.argv[1]))
site.publish(report.render(db, out, processes=int(sys.argv[3]), site=site))
print(json.dumps(returned))
"""


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("processes") / "history.db"
    db = store.open_db(path)
    store.save_runs(db, synthetic.records(NIGHTS * len(synthetic.configs())))
    db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.conn.close()
    return path


def _render(history: Path, out: Path, processes: int, how: str = "ok") -> list:
    done = subprocess.run(
        [sys.executable, "-c", RENDER, str(history), str(out), str(processes), how],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_helper_renders_the_run_pages_and_the_site_is_the_one_process_site(history, tmp_path):
    assert _render(history, tmp_path / "one", 1) == []
    assert _render(history, tmp_path / "two", 2) == [PAGES]
    one, two = site_files(tmp_path / "one"), site_files(tmp_path / "two")
    listed = [page for path, page in one.items() if path.startswith("runs/")]
    assert len(listed) == PAGES
    assert sum(page.count(b'<section id="run-') for page in listed) == NIGHTS * len(synthetic.configs())
    assert one == two


def test_a_failed_helper_leaves_the_pages_to_the_parent(history, tmp_path):
    assert _render(history, tmp_path / "one", 1) == []
    assert _render(history, tmp_path / "failed", 2, "fail") == [None]
    assert site_files(tmp_path / "one") == site_files(tmp_path / "failed")


def test_a_re_render_by_the_same_code_forks_no_helper(history, tmp_path):
    assert _render(history, tmp_path / "site", 2) == [PAGES]
    assert _render(history, tmp_path / "site", 2) == []  # a night's pages at most: not worth a fork


INTERRUPTED = """
import os, sys
from pathlib import Path
from diag import report, store
from diag.report import forked, matrix_pages

sent = []
original = forked.Helper.send
def send(self, task):
    sent.append(len(task[0]))
    original(self, task)
forked.Helper.send = send
def interrupt(*args, **kwargs):
    raise KeyboardInterrupt  # Ctrl-C while the parent renders the matrix and the helper the run pages
matrix_pages.pages = interrupt
db = store.open_db(sys.argv[1], readonly=True)
out = Path(sys.argv[2])
try:
    report.render(db, out, processes=2, site=report.Site(out, Path(sys.argv[1])))
except KeyboardInterrupt:
    pass
print("helper given", sent)
try:
    os.waitpid(-1, os.WNOHANG)
    print("a child is left")
except ChildProcessError:
    print("no child is left")
"""


def test_a_render_interrupted_leaves_no_helper_behind(history, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED, str(history), str(tmp_path / "site")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == [f"helper given [{PAGES}]", "no child is left"]


GONE = """
import os, signal, sys
from pathlib import Path
from diag import report, store
from diag.report import forked

original = forked.Helper.send
def send(self, task):
    os.kill(self.pid, signal.SIGKILL)  # the helper is killed before it gets its task
    os.waitpid(self.pid, 0)
    self.pid = None
    original(self, task)
forked.Helper.send = send
db = store.open_db(sys.argv[1], readonly=True)
out = Path(sys.argv[2])
site = report.Site(out, Path(sys.argv[1]))
site.publish(report.render(db, out, processes=2, site=site))
"""


def test_a_helper_killed_before_its_task_leaves_the_pages_to_the_parent(history, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", GONE, str(history), str(tmp_path / "gone")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert _render(history, tmp_path / "one", 1) == []
    assert site_files(tmp_path / "one") == site_files(tmp_path / "gone")


def test_no_helper_is_forked_beside_another_thread():
    assert forked.can_fork() == (sys.platform.startswith("linux") and threading.active_count() == 1)
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert not forked.can_fork()
    finally:
        release.set()
        other.join()


def test_processes_out_of_range_is_a_one_line_error(history, tmp_path):
    done = diag("report", "--db", str(history), "--out", "site", "--processes", "3", cwd=tmp_path, check=False)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "--processes" in done.stderr


@pytest.mark.parametrize("foreign", ["notes.txt", "runs/1-append_last.html"])
def test_a_folder_or_page_that_is_not_diags_is_refused_before_the_helper_writes(history, tmp_path, foreign):
    """The helper writes the run pages into the site itself: the site claims them first, so a folder
    that is someone else's, or a page there that diag did not write, stops the render before any
    page is written."""
    out = tmp_path / "site"
    (out / "runs").mkdir(parents=True)
    if foreign.startswith("runs/"):  # diag's folder (a manifest), but a page there that is not diag's
        (out / report.MANIFEST).write_text("[]")
    (out / foreign).write_text("mine")
    done = diag("report", "--db", str(history), "--out", str(out), "--processes", "2", cwd=tmp_path, check=False)
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert foreign in done.stderr
    assert (out / foreign).read_text() == "mine"
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*.html")) == (
        [foreign] if foreign.endswith(".html") else []
    )


def test_a_command_imports_only_its_own_module():
    probe = (
        "import sys\n"
        "from diag.cli import cli\n"
        "assert cli.get_command(None, 'report') is not None\n"
        "print(sorted(m for m in sys.modules if m.startswith(('diag.cli.', 'diag.run.runner', 'diag.bisect'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    # the parameter types and the output rule every command shares, beside the group and the command's own module
    assert done.stdout.strip() == "['diag.cli.checks', 'diag.cli.common', 'diag.cli.params', 'diag.cli.reading']"


def test_the_store_imports_sqlite_utils_without_numpy_which_imports_later_as_ever():
    probe = (
        "import sys\n"
        "from diag.cli import cli\n"
        "cli.get_command(None, 'report')\n"
        "from diag import report, store\n"
        "print('numpy' in sys.modules, 'pandas' in sys.modules)\n"
        "import numpy\n"
        "print(float(numpy.ones(3).sum()))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["False", "False", "3.0"]


def test_the_report_imports_no_network_client_and_no_process_supervisor():
    """`diag report` reads a DB and writes files: urllib's HTTP client (with ssl and email) and the
    probe's supervisor (with subprocess and ctypes) were a third of its imports' CPU."""
    probe = (
        "import sys\n"
        "from diag.cli import cli\n"
        "cli.get_command(None, 'report')\n"
        "import diag.report\n"
        "heavy = ('urllib.request', 'http.client', 'ssl', 'diag.probe.supervise')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "from diag.contract import oom_kills\n"
        "print(isinstance(oom_kills(), (int, type(None))), 'diag.probe.supervise' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split("\n")[:2] == ["[]", "True True"]


def test_every_command_is_listed_where_it_is_defined():
    from diag.cli import cli
    from diag.cli.common import COMMAND_MODULES

    commands = cli.commands  # imports every command module
    assert sorted(commands) == sorted(COMMAND_MODULES)
    for name, command in commands.items():
        assert command.callback.__module__ == f"diag.cli.{COMMAND_MODULES[name]}", name


def test_two_reports_into_one_folder_at_once_both_finish_and_give_the_site_one_gives(history, tmp_path):
    """Two renders into one folder while a third holds it: each waits (and says so) rather than
    refusing another's half-written files as a stranger's, then they render one after the other; the
    site is the one a render alone gives, byte for byte."""
    import fcntl
    import os
    import time

    alone = tmp_path / "alone"
    diag("report", "--db", str(history), "--out", str(alone), cwd=tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    command = [sys.executable, "-m", "diag", "report", "--db", str(history), "--out", str(shared)]
    held = os.open(shared, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)  # as a render in progress holds it
    logs = [tmp_path / f"{i}.err" for i in range(2)]
    both = [subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=log.open("wb")) for log in logs]
    deadline = time.monotonic() + 120
    while not all(b"another diag report is writing" in log.read_bytes() for log in logs):
        assert time.monotonic() < deadline and all(p.poll() is None for p in both), [log.read_bytes() for log in logs]
        time.sleep(0.05)
    os.close(held)
    assert [process.wait(timeout=300) for process in both] == [0, 0], [log.read_bytes() for log in logs]
    assert site_files(shared) == site_files(alone)
