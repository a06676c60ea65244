"""The boundary between the probe and the orchestrator (docs/ARCHITECTURE.md).

The probe runs in bare torch environments: it never imports the orchestrator's packages. The
orchestrator reaches the probe's vocabulary through diag/contract.py alone, and these are the
names that cross. The modules import each other without cycles, at the top or inside functions.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO

ORCHESTRATOR_ONLY = ("click", "jinja2", "sqlite_utils", "markupsafe")
PACKAGE = REPO / "diag"
PROBE_SIDE = (PACKAGE / "probe", PACKAGE / "cases")
CONTRACT = PACKAGE / "contract.py"
# What crosses from the probe into the orchestrator. A name added here is a change to the boundary:
# say in docs/ARCHITECTURE.md why the orchestrator needs it.
CROSSING = {
    "normalise",
    "records",
    "record_types",
    "statuses",
    "ARG_MISMATCH",
    "BY_NAME",
    "COUNT_PASS_LIMIT",
    "DTYPES",
    "ENVIRONMENT_ERRNOS",
    "FINDING_KINDS",
    "FINDING_TABLES",
    "LIFELINE_VARIABLE",
    "MODES",
    "STATUSES",
    "TINY_LLAMA",
    "WORKS",
    "CaseError",
    "Config",
    "errors_in_stderr",
    "read_case_header",
    "stable_key",
    "graph_break_id",
    "oom_kills",
    "oom_kills_since",
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import in ``path``, relative ones resolved; inside functions too."""
    found = []
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            found.append((base, [alias.name for alias in node.names]))
    return found


def _on_probe_side(path: Path) -> bool:
    return any(side in path.parents for side in PROBE_SIDE)


def test_probe_modules_import_without_orchestrator_packages():
    probe = sorted(name for name, path in _modules().items() if _on_probe_side(path) and path.parent.name == "probe")
    assert len(probe) >= 14
    code = (
        "import importlib, sys\n"
        f"for name in {probe!r}: importlib.import_module(name)\n"
        f"bad = [m for m in {ORCHESTRATOR_ONLY!r} if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip() == ""


def test_cases_do_not_import_orchestrator_packages():
    for file in sorted((PACKAGE / "cases").glob("*.py")):
        for module, _ in _imports(file):
            assert module.split(".")[0] not in ORCHESTRATOR_ONLY, (file, module)
            assert not module.startswith("diag.") or module.startswith("diag.probe"), (file, module)


def test_the_orchestrator_reaches_the_probe_through_the_contract_alone():
    crossing = set()
    for name, path in _modules().items():
        if _on_probe_side(path):
            continue
        for module, names in _imports(path):
            if module == "diag.probe" or module.startswith("diag.probe."):
                assert path == CONTRACT, f"{name} imports {module}: take it from diag.contract"
                crossing.update(names or [module])
            if module == "diag.contract":
                assert set(names) <= CROSSING, (name, set(names) - CROSSING)
    assert crossing == CROSSING


def test_no_module_imports_itself_back():
    """No import cycle among diag's modules, counting imports inside functions."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for module, names in _imports(path):
            for target in [module, *(f"{module}.{n}" for n in names)]:
                if target in modules and target != name and not name.startswith(target + "."):
                    edges.add(target)
        graph[name] = edges
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append(trail[trail.index(target) :] + [target])
            elif target not in state:
                visit(target, [*trail, target])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_every_room_stays_small():
    """A module holds one thing, small enough to read at once: no file of diag/ or bench/ over 450 lines."""
    long = {
        str(path.relative_to(REPO)): count
        for path in sorted([*PACKAGE.rglob("*.py"), *(REPO / "bench").rglob("*.py")])
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > 450
    }
    assert long == {}


# What the top of diag/ holds: the shared vocabulary and the one-command features; the pipeline is in
# its folders (docs/ARCHITECTURE.md, "The rooms"). A module added here says why it is not in one.
TOP_LEVEL_MODULES = {
    "__init__", "__main__",
    "build", "config", "contract", "errors", "guards", "pages", "row", "stopping", "text",  # vocabulary
    "verdict_text",  # the terminal's text of verdicts, beside text's of runs: one module was past the cap
    "stats", "noise",  # numbers, and a measurement's trust: judged where it is taken, read by verdicts
    "figure",  # a judged figure as every surface reads it: the one reader of the trust columns
    "signal",  # what a bisect searches on (a status, a key, a count), read from a run below every verdict
    "backfill", "bisect", "export", "repro", "upstream",  # one command each
    "searching",  # bisect's pure search, judged over one run or many a build: bisect was past the cap
}  # fmt: skip
PACKAGES = {"cases", "cli", "envs", "probe", "report", "run", "store", "verdicts"}


def test_the_top_level_holds_what_it_is_allowed_to():
    """The folders of diag/ tell the pipeline: a new module goes into the folder of its step."""
    modules = {path.stem for path in PACKAGE.glob("*.py")}
    packages = {path.name for path in PACKAGE.iterdir() if path.is_dir() and any(path.glob("*.py"))}
    assert (modules, packages) == (TOP_LEVEL_MODULES, PACKAGES)


# The functions allowed past 60 lines: the first migration, frozen as it shipped (a migration never
# changes once released), and the table of run options, one declaration per option.
LONG_FUNCTIONS_ALLOWED = {"diag/store/schema.py:m001_initial", "diag/cli/common.py:config_options"}


def test_every_function_reads_at_once():
    """No function of diag/ over 60 lines but those LONG_FUNCTIONS_ALLOWED names; and each of those is
    still there and still long (a name left in the list after a split is stale)."""
    long = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                long.add(f"{path.relative_to(REPO).as_posix()}:{node.name}")
    assert long == LONG_FUNCTIONS_ALLOWED


SQL = re.compile(
    r"""["']\s*(?:select|insert\s+into|update\s+\w+\s+set|delete\s+from|alter\s+table"""
    r"""|create\s+(?:table|index|view|trigger)|drop\s+(?:table|index|view))\s""",
    re.I,
)


def test_sql_lives_in_the_store_alone():
    """Every SQL statement of diag is in diag/store/: a query anywhere else is a second definition of
    what a table holds, which the next migration leaves behind."""
    diag = REPO / "diag"
    found = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted(diag.rglob("*.py"))
        if "store" not in path.relative_to(diag).parts[:1]
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if SQL.search(line)
    ]
    assert found == [], found
    assert SQL.search('db.execute("SELECT count(*) FROM runs")')  # the check can fail
