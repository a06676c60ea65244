"""What a run needs, checked before any probe starts: bad input is one line, and nothing is written.

Three checks, in the order ``diag run`` makes them: the configs against the model they
will run on (sizes it can hold, a checkpoint folder that is one); the database (writable,
room on its disk) without creating it; then, per torch environment, what only that
environment can answer (the case files import, the device exists), through the probe.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

from diag import envs, store
from diag.config import artifacts_root
from diag.contract import TINY_LLAMA, Config, record_types, records
from diag.errors import DiagError
from diag.run import catalog
from diag.run.catalog import CaseRef

# Room a run needs on the database's disk: its rows (timing samples are the bulk, ~130 KB) and the
# start of its run directory. Below this a run would die at its final save.
MIN_FREE_BYTES = 16 * 2**20


class PreflightError(DiagError):
    """Input a run cannot be made from; the message is one line that says what to change."""


def model_positions(model: Optional[str]) -> int:
    """How many positions the model holds: the tiny default's, or a checkpoint's config.json."""
    if model is None:
        return int(TINY_LLAMA["max_position_embeddings"])
    config = Path(model) / "config.json"
    try:
        settings = json.loads(config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PreflightError(
            f"--model {model} has no config.json: not a transformers checkpoint folder (save one with save_pretrained)"
        ) from None
    except (OSError, ValueError) as exc:
        raise PreflightError(f"--model {model}: cannot read config.json ({exc})") from exc
    if not any(Path(model).glob("*.safetensors")) and not any(Path(model).glob("*.bin")):
        raise PreflightError(f"--model {model} has a config.json but no weights (*.safetensors or *.bin)")
    return int(settings.get("max_position_embeddings") or 2**31)


def check_configs(configs: list[Config]) -> None:
    """Every config fits its model: the prompt and the generated tokens within its positions."""
    for config in configs:
        positions = model_positions(config.model)
        length = config.prompt_length + config.new_tokens
        if length > positions:
            raise PreflightError(
                f"--prompt-length {config.prompt_length} + --new-tokens {config.new_tokens} = "
                f"{length} positions; the model holds {positions}"
            )


def check_database(db_path: str) -> None:
    """The DB can take runs: an existing one is writable; a new one's folder exists and has room."""
    path = Path(db_path)
    existed = store.check_path(path)
    folder = path.resolve().parent
    if not folder.is_dir():
        raise PreflightError(f"cannot write database {db_path}: directory {folder} does not exist")
    if existed:
        store.check_writable(path)
    # a run's directory goes under <db stem>.runs/ beside the DB: that folder, or the DB's, must take it
    runs = artifacts_root(path.resolve())
    place = runs if runs.is_dir() else folder
    try:
        # a name of this process's own: two diag runs starting on one new DB must not race on one file
        handle, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".diag-write-test", dir=place)
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        if not existed:
            raise PreflightError(
                f"cannot create database {db_path}: {folder} is not writable ({exc.strerror or exc})"
            ) from exc
        raise PreflightError(
            f"cannot store runs in {db_path}: their run directories go in {runs}, and {place} is not writable "
            f"({exc.strerror or exc})"
        ) from exc
    free = shutil.disk_usage(folder).free
    if free < MIN_FREE_BYTES:
        raise PreflightError(
            f"the disk holding {db_path} is full ({free // 1024} KB free; a run needs about "
            f"{MIN_FREE_BYTES // 2**20} MB for its rows and run directory)"
        )


def check_architectures(environments: list[envs.TorchEnv], refs: list[CaseRef]) -> None:
    """Each ``hf:<model_type>`` case is one of the architectures ``hf:all`` stands for in at least one
    of ``environments`` (model types are case-sensitive: ``hf:ALL`` and ``hf:Llama`` are none), never
    runs that can only fail to build their model. Where only some environments' transformers have it
    (a matrix over transformers releases), the others' runs say so as eager_error, a finding."""
    from diag.run import matrix  # the architectures are asked of the environments, as hf:all asks them

    wanted = [ref.name for ref in refs if ref.name.startswith(catalog.HF_PREFIX)]
    if not wanted:
        return
    known = set(matrix.hf_architectures(environments, lambda message: None))
    unknown = [name for name in wanted if name[len(catalog.HF_PREFIX) :] not in known]
    if unknown:
        name = unknown[0]
        close = difflib.get_close_matches(name[len(catalog.HF_PREFIX) :].lower(), sorted(known), n=3)
        if name.lower() == catalog.HF_ALL:
            close = ["all"]
        hint = f"; did you mean {', '.join(catalog.HF_PREFIX + c for c in close)}?" if close else ""
        raise PreflightError(
            f"{name}: not one of the {len(known)} decoder-only causal-LM architectures of the transformers in "
            f"{', '.join(env.python for env in environments)} (hf:all runs every one){hint}"
        )


def check_environment(env: envs.TorchEnv, refs: list[CaseRef], configs: list[Config]) -> None:
    """In the target environment: user case files import and register a case; GPU devices exist."""
    files = [ref.path for ref in refs if not ref.builtin]
    devices = sorted({config.device for config in configs if config.device != "cpu"})
    if not files and not devices:
        return
    args = [arg for device in devices for arg in ("--device", device)] + files
    with tempfile.TemporaryDirectory(prefix="diag-check-") as folder:
        out = Path(folder) / "checks.jsonl"
        try:
            done = subprocess.run(
                env.probe_command("check", "--out", str(out), *args),
                capture_output=True,
                text=True,
                env=env.probe_environ(),
                timeout=600,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PreflightError(f"cannot check the run in {env.python}: {exc}") from exc
        found = records.read(out)[0]
    written = record_types.Found(found)
    checks = written.all(records.DEVICE_CHECK) + written.all(records.CASE_CHECK)
    if len(checks) != len(files) + len(devices):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise PreflightError(f"cannot check the run in {env.python}: {last}")
    for check in checks:
        if not check["ok"]:
            raise PreflightError(check["error"])
