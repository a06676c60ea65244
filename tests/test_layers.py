"""The layers of diag, lowest first: a module imports only from its own layer or a lower one, at the
top of the file or inside a function. So the store never asks a verdict what to keep, a run is
assembled without a verdict, and a verdict never reads a page; what two layers share is in the lower.

- ground: the shared vocabulary (builds, rows, the probe's contract, errors, statistics, what a
  measurement's noise is), the store, the environments, the probe and its cases.
- pipeline: a run from its matrix to a storable record, and the one-command features that drive runs.
- verdicts: judgements across stored runs.
- report: what a user reads: the site, and the terminal's text.
- command line: the click commands.
"""

from __future__ import annotations

from test_boundary import _imports, _modules

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "ground",
        (
            "diag",
            "diag.build",
            "diag.cases",
            "diag.config",
            "diag.contract",
            "diag.envs",
            "diag.errors",
            "diag.figure",
            "diag.guards",
            "diag.noise",
            "diag.pages",
            "diag.probe",
            "diag.row",
            "diag.signal",
            "diag.stats",
            "diag.stopping",
            "diag.store",
        ),
    ),
    (
        "pipeline",
        ("diag.backfill", "diag.bisect", "diag.searching", "diag.export", "diag.repro", "diag.run", "diag.upstream"),
    ),
    ("verdicts", ("diag.verdicts",)),
    ("report", ("diag.report", "diag.text", "diag.verdict_text")),
    ("command line", ("diag.__main__", "diag.cli")),
)


def _layer(module: str) -> int:
    """The layer of ``module``: that of the longest listed name it is or lies under."""
    best, length = -1, -1
    for index, (_, names) in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > length:
                best, length = index, len(name)
    return best


def test_every_module_has_a_layer():
    assert [name for name in _modules() if _layer(name) < 0] == []


def test_no_module_imports_from_a_higher_layer():
    modules = _modules()
    upward = []
    for name, path in modules.items():
        for target, names in _imports(path):
            if target != "diag" and not target.startswith("diag."):
                continue
            # ``from diag import store`` imports the module diag.store, not the package
            imported = [f"{target}.{n}" for n in names if f"{target}.{n}" in modules] or [target]
            upward += [
                f"{name} ({LAYERS[_layer(name)][0]}) imports {module} ({LAYERS[_layer(module)][0]})"
                for module in imported
                if _layer(module) > _layer(name)
            ]
    assert upward == []
