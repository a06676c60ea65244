"""What bench/run.py's parts share: where things are, the cases, timing a command, the nightly leg."""

from __future__ import annotations

import compileall
import os
import resource
import subprocess
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent

BENCH = REPO / "bench"

CASES = ["append_last", "dynamic_slice", "hf_static_cache", "hf_dynamic_cache"]


def compiled(root: Path = REPO) -> None:
    """Write the bytecode of the diag checked out in ``root``, as pip does when it installs a package.
    Where PYTHONDONTWRITEBYTECODE is set (as on the machine these figures come from), each command
    would otherwise compile diag's modules from source again: 0.05 s that no installed diag pays.
    Bytecode already written is read whatever that variable says."""
    compileall.compile_dir(root / "diag", quiet=1)


def timed(command: list[str], env: dict | None = None, cwd: Path | None = None) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{command} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - start, done.stdout


def environ(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_")}
    env.update(extra)
    return env


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


LEG = ["--case", "all", "--threads", "1", "--repeat", "5", "--timing-seconds", "2"]  # as nightly.yml's CPU legs


def leg_option(name: str) -> str:
    """A setting of the nightly CPU leg's `diag run` (tests/test_bench.py holds LEG to nightly.yml)."""
    return LEG[LEG.index(name) + 1]


def graph_break_pages(db, keys: int = 300) -> tuple[int, float]:
    """The report's graph-break pages for ``keys`` distinct GB ids (the synthetic history's breaks
    spread over them; it has one): how many pages, and the CPU seconds they add to a render."""
    from diag import report, store
    from diag.report import breaks_page, context, history, inputs, templating

    db.execute(f"UPDATE graph_breaks SET key = printf('GB%04d', id % {keys})")
    db.conn.commit()
    matrix = history.build_matrix(store.builds(db), store.report_runs(db), store.finding_keys(db), 30)
    start = time.process_time()
    found = breaks_page.contexts(db, matrix)
    shared = {"case_links": [], "has_architectures": False, "has_variants": False, "has_breaks": True}
    shared.update({"paged": {}, "data_stamp": "", "key_texts": {}, "detail_builds": 30})
    out = Path(".")
    this = context.Render(db, context.Options(out), templating.environment(), inputs.Pages(out, False), False)
    this.common = shared
    this.page("breaks.html.j2", root="", breaks=found, **shared)
    report.key_pages(this, found, breaks_page.BREAKS)
    return len(found), time.process_time() - start


def _tree_memory_mb(root: int) -> tuple[float, float]:
    """The memory of ``root`` and all its descendants now (MB), from /proc: the sum of their
    proportional set sizes (a page shared by n processes, as a forked child shares its parent's,
    counted 1/n in each: the tree's memory, counted once) and the largest resident set of one of them."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            parents[int(entry.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier += children
    pss, rss = 0, 0
    for pid in tree:
        try:
            found = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:])
        except (OSError, ValueError):
            continue  # ended meanwhile
        pss += int(found["Pss"].split()[0])
        rss = max(rss, int(found["Rss"].split()[0]))
    return pss / 1024, rss / 1024


def tree_usage(command: list[str], cwd: Optional[Path] = None) -> dict:
    """What ``command`` cost with every process it started: wall seconds, CPU seconds (user + system,
    of the process and of its descendants, as the kernel counts them when each ends; also apart), the
    peak of the tree's memory (``_tree_memory_mb``: proportional set sizes summed, and the largest
    resident set of one process; sampled every 50 ms), and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=cwd)
    peak, largest = 0.0, 0.0
    while process.poll() is None:
        pss, rss = _tree_memory_mb(process.pid)
        peak, largest = max(peak, pss), max(largest, rss)
        time.sleep(0.05)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if process.returncode != 0:
        raise RuntimeError(f"{command} failed with {process.returncode}")
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    return {
        "wall_s": seconds,
        "cpu_s": user + system,
        "user_s": user,
        "system_s": system,
        "peak_mb": peak,
        "largest_rss_mb": largest,
        "stdout": process.stdout.read(),
    }
