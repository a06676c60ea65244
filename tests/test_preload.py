"""What the probe imports before forking its passes, so that neither pass imports it again."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict

import pytest
from factories import run_record, stored

from diag import envs
from diag import row as rows
from diag.contract import Config
from diag.probe import supervise
from diag.run import catalog, runner

LOADED = """
import json, os, sys
from diag.probe import supervise
supervise.preload({backend!r})
print(json.dumps({{
    "llama": "transformers.models.llama.modeling_llama" in sys.modules,
    "inductor": "torch._inductor.compile_fx" in sys.modules,
    "aot": "torch._functorch.aot_autograd" in sys.modules,
    "warm_pool": os.environ.get("TORCH_WARM_POOL"),
}}))
"""


def _loaded(backend, **env) -> dict:
    import os

    done = subprocess.run(
        [sys.executable, "-c", LOADED.format(backend=backend)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    )
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow  # an interpreter that imports torch and transformers: about 4.6 CPU-s
def test_the_model_both_passes_build_is_imported_before_forking():
    found = _loaded(None)
    assert found["llama"], "transformers' Llama would be imported again by each pass"
    assert not found["inductor"], "a backend's compiler was imported though no backend was named"


@pytest.mark.slow  # three interpreters that import torch and its whole inductor stack: about 12 CPU-s
def test_the_named_backend_is_imported_with_its_worker_pool_left_cold():
    found = _loaded("inductor")
    assert found["inductor"]
    assert found["warm_pool"] is None, "TORCH_WARM_POOL must be put back as it was for the passes"
    assert _loaded("inductor", TORCH_WARM_POOL="1")["warm_pool"] == "1"
    assert _loaded("aot_eager")["aot"]


def _job(**config) -> runner.Job:
    case = catalog.resolve(["dynamic_slice"])[0]
    return runner.Job(envs.resolve(envs.parse_spec("current")), case, Config(**config))


def _stored(db_path, job: runner.Job, status: str, uid: str) -> None:
    columns = rows.columns(asdict(job.config), job.case.name, job.case.source)
    stored(db_path, run_record(**columns, uid=uid, status=status))


@pytest.mark.parametrize(
    "history, expected_hint, preloaded",
    [
        ([], None, "inductor"),  # no run of the row yet: most rows reach the backend
        (["pass"], True, "inductor"),
        (["pass", "fullgraph_error"], False, None),  # the newest run decides
        (["fullgraph_error", "compile_error"], True, "inductor"),  # a lowering error reached it
        (["eager_error"], False, None),
        (["eager_fallback"], False, None),
    ],
)
def test_the_backend_is_imported_before_forking_only_where_the_row_reached_it_before(
    tmp_path, history, expected_hint, preloaded
):
    db_path = tmp_path / "h.db"
    job = _job(backend="inductor", fullgraph=True)
    for n, status in enumerate(history):
        _stored(db_path, job, status, f"u{n}")
    other = _job(backend="inductor", fullgraph=True, batch_size=4)  # another row of the same case
    _stored(db_path, other, "fullgraph_error" if expected_hint is not False else "pass", "other")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    spec = runner.write_spec(job, run_dir, True, None, db_path)
    assert json.loads(spec.read_text())["lowered_before"] is expected_hint
    assert supervise.backend_to_preload(str(spec)) == preloaded


def test_a_missing_or_unreadable_history_is_no_hint(tmp_path):
    job = _job(backend="inductor")
    assert runner.lowered_before(tmp_path / "none.db", job) is None
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    assert runner.lowered_before(tmp_path / "junk.db", job) is None
