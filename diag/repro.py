"""``diag repro``: a standalone script that rebuilds a run's model, inputs and compile, with no diag import.

The script carries the sources it needs (the case file, the shared Llama
helpers and the small case API) as text, writes them to a temporary folder
and imports them from there, so tracebacks show real source lines. It needs
only torch and transformers.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from diag.config import PACKAGE_ROOT
from diag.contract import TINY_LLAMA
from diag.errors import DiagError
from diag.store.typed import StoredRun

PROBE = PACKAGE_ROOT / "probe"
REWRITES = [
    (re.compile(r"^from diag\.probe\.spec import TINY_LLAMA$", re.M), f"TINY_LLAMA = {TINY_LLAMA!r}"),
    (re.compile(r"^from diag\.probe\.cases import ", re.M), "from case_api import "),
    (re.compile(r"^from diag\.probe import llama$", re.M), "import llama"),
    (re.compile(r"^from diag\.probe import hf$", re.M), "import hf"),
    (re.compile(r"^from diag\.probe\.tiny import tiny_config$", re.M), "from tiny import tiny_config"),
]
_DIAG_IMPORT = re.compile(r"^\s*(from diag[\w.]* import|import diag)", re.M)


class ReproError(DiagError):
    pass


def _standalone(source: str, origin: str) -> str:
    for pattern, replacement in REWRITES:
        source = pattern.sub(replacement, source)
    leftover = _DIAG_IMPORT.search(source)
    if leftover:
        raise ReproError(
            f"{origin} imports {leftover.group(0).strip()!r}; a repro can carry only cases that "
            "import torch, transformers, diag.probe.llama, diag.probe.hf and diag.probe.cases"
        )
    return source


SCRIPT = '''#!/usr/bin/env python
"""Reproduce diag run #{run_id}: case {case!r} under torch.compile({options_text}).

Recorded on torch {torch_version} (git {git_version}) with transformers {transformers_version}:
status {status}{error_line}.

Needs only torch and transformers: python {filename}
It prints the graph breaks and recompiles torch reports, then compares compiled
tokens with eager. A compile error is raised as torch raises it.
"""

import sys
import tempfile
from pathlib import Path

import torch

OPTIONS = {options!r}
WORKLOAD = {workload!r}
SOURCES = {sources}

# Removed again when the script ends, however it ends.
carried = tempfile.TemporaryDirectory(prefix="repro-")
folder = Path(carried.name)
for name, text in SOURCES.items():
    (folder / name).write_text(text, encoding="utf-8")
sys.path.insert(0, str(folder))

import llama  # noqa: E402 (after sys.path names the carried modules)
from case_api import Generation, load_case_file  # noqa: E402 (after sys.path names the carried modules)


def generate(case, model, input_ids, attention_mask, compile_fn):
    gen = Generation(model, input_ids, attention_mask, WORKLOAD["new_tokens"], compile_fn, case_name={case!r},
                     seed=WORKLOAD["seed"])
    torch.manual_seed(WORKLOAD["seed"])  # as diag seeds every pass: a case's own model is built the same
    with torch.no_grad():
        case.generate(gen)
    return torch.cat(gen.tokens, dim=1)


def main():
    if WORKLOAD["threads"]:
        torch.set_num_threads(WORKLOAD["threads"])
    case = load_case_file(str(folder / {case_file!r}))
    dtype = getattr(torch, WORKLOAD["dtype"])
    model = llama.build_model(WORKLOAD["model"], dtype, WORKLOAD["device"], WORKLOAD["seed"])
    input_ids, attention_mask = llama.make_prompt(WORKLOAD["batch_size"], WORKLOAD["prompt_length"],
                                                  model.config.vocab_size, WORKLOAD["seed"], WORKLOAD["device"])
    eager = generate(case, model, input_ids, attention_mask, lambda fn: fn)
    torch._logging.set_logs(graph_breaks=True, recompiles=True)
    compiled = generate(case, model, input_ids, attention_mask, lambda fn: torch.compile(fn, **OPTIONS))
    from torch._dynamo.utils import counters
    print("graph count:", counters["stats"].get("unique_graphs", 0))
    print("tokens equal eager:", bool(torch.equal(eager, compiled)))


if __name__ == "__main__":
    main()
'''


def script(run: StoredRun, case_path: str, filename: str = "repro.py") -> str:
    """The repro script for a stored run whose case file is at ``case_path``."""
    config = run.get("config") or {}
    case_file = Path(case_path)
    if not case_file.is_file():
        raise ReproError(f"the case file of run #{run['id']} is gone: {case_path}")
    case_name = f"case_{re.sub(r'[^A-Za-z0-9_]', '_', case_file.stem)}.py"
    sources = {
        "case_api.py": (PROBE / "cases.py").read_text(encoding="utf-8"),
        "llama.py": _standalone((PROBE / "llama.py").read_text(encoding="utf-8"), "diag/probe/llama.py"),
        case_name: _standalone(case_file.read_text(encoding="utf-8"), case_path),
    }
    for sibling in siblings(case_file):  # modules next to the case file that it imports: carried too
        sources.setdefault(sibling.name, _standalone(sibling.read_text(encoding="utf-8"), str(sibling)))
    # diag's transformers helpers, only where the case imports them: the script stays short enough to
    # paste into an issue (upstream.py)
    for module in ("hf", "tiny"):
        if any(re.search(rf"^(import {module}|from {module} import)", text, re.M) for text in list(sources.values())):
            path = PROBE / f"{module}.py"
            sources[f"{module}.py"] = _standalone(path.read_text(encoding="utf-8"), f"diag/probe/{module}.py")
    options = {
        "backend": config.get("backend", run["backend"]),
        "fullgraph": bool(run["fullgraph"]),
        "dynamic": config.get("dynamic"),
    }
    if config.get("mode"):
        options["mode"] = config["mode"]
    workload = {
        key: config.get(key)
        for key in ("batch_size", "prompt_length", "new_tokens", "dtype", "device", "model", "seed", "threads")
    }
    error = f": {run['error_type']} at {run['error_location']}" if run.get("error_type") else ""
    return SCRIPT.format(
        run_id=run["id"],
        case=run["case"],
        options=options,
        workload=workload,
        case_file=case_name,
        options_text=", ".join(f"{k}={v!r}" for k, v in options.items()),
        filename=filename,
        torch_version=run.get("build_version") or run.get("torch_version"),
        git_version=run.get("build_git_version") or "unknown",
        transformers_version=run.get("transformers_version"),
        status=run["status"],
        error_line=error,
        sources="{\n" + "".join(f"    {name!r}: {text!r},\n" for name, text in sources.items()) + "}",
    )


def siblings(case_file: Path) -> list[Path]:
    """The modules in the case file's folder that it imports, and those they import, in turn (a
    case's folder is on sys.path when it runs, so a case may keep its helpers there)."""
    found: list[Path] = []
    pending = [case_file]
    while pending:
        source = pending.pop()
        try:
            tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        names = {
            alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
        }
        names |= {
            node.module.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and not node.level
        }
        for name in sorted(names):
            module = case_file.parent / f"{name}.py"
            if module.is_file() and module != case_file and module not in found:
                found.append(module)
                pending.append(module)
    return found


def case_path_of(run: StoredRun) -> str:
    """The case file a run used: recorded on the run, else read from the spec in its run directory."""
    if case_path := run.get("case_path"):
        return case_path
    spec = Path(run.get("artifacts_dir") or "") / "spec.json"
    try:
        return json.loads(spec.read_text(encoding="utf-8"))["case_path"]
    except (OSError, KeyError, json.JSONDecodeError) as exc:
        raise ReproError(f"run #{run['id']} has no readable spec.json in {spec.parent}: {exc}") from exc
