"""``diag run --count-instructions``: the cold compile's instructions, counted by a real callgrind
(this host gives no hardware counter) or said to be uncountable, stored, shown and on the run page.
Real subprocesses, real valgrind."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import diag, show
from factories import small

VALGRIND = shutil.which("valgrind")


def _one_layer_llama(folder: Path) -> Path:
    """The smallest compile that still shows the method: a one-layer Llama saved beside the test (under
    callgrind, every op dynamo traces costs tens of times its native time)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from diag.contract import TINY_LLAMA

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**{**TINY_LLAMA, "num_hidden_layers": 1})).save_pretrained(folder)
    return folder


def _counted_run(tmp_path: Path, *extra: str, env_extra=None) -> tuple[Path, dict]:
    db = tmp_path / "i.db"
    done = diag(
        "run",
        "--case",
        "append_last",
        *small(new_tokens=3, prompt_length=4),
        "--count-instructions",
        *extra,
        "--db",
        str(db),
        "--json",
        cwd=tmp_path,
        env_extra=env_extra,
    )
    (listed,) = json.loads(done.stdout)
    return db, show(db, listed["id"], tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(VALGRIND is None, reason="valgrind is not installed (apt-get install valgrind)")
def test_the_cold_compile_is_counted_under_callgrind_and_shown(tmp_path):
    from diag.probe import compat

    db, run = _counted_run(tmp_path, "--model", str(_one_layer_llama(tmp_path / "one-layer")))
    how, _ = compat.instruction_method()
    assert run["instructions_method"] == how  # callgrind here; perf where the host has a counter
    # a compile of even a one-layer Llama through dynamo executes tens of millions of instructions
    assert run["compile_instructions"] > 10_000_000 and run["instructions_note"] is None
    assert run["status"] == "pass"
    shown = diag("show", str(run["id"]), "--db", str(db), cwd=tmp_path).stdout
    assert f"compile instructions: {run['compile_instructions']:,} ({how})" in shown
    assert f"instruction_count: yes — {how}" in shown
    site = tmp_path / "site"
    diag("report", "--db", str(db), "--out", str(site), cwd=tmp_path)
    pages = "".join(p.read_text() for p in site.rglob("*.html"))
    assert f"{run['compile_instructions']:,} ({how})" in pages and "Compile instructions" in pages


@pytest.mark.slow
def test_a_host_with_no_method_says_so_and_nothing_else_changes(tmp_path):
    """No hardware counter here, and valgrind kept off PATH: the run is stored as without the option,
    with the reason in its capabilities and in instructions_note."""
    python_dir = str(Path(os.sys.executable).parent)
    db, run = _counted_run(tmp_path, env_extra={"PATH": python_dir})
    assert run["status"] == "pass" and run["compile_instructions"] is None
    assert "valgrind is not installed" in run["instructions_note"]
    said = run["capabilities"]["instruction_count"]
    assert not said["available"] and "valgrind is not installed" in said["detail"]
    shown = diag("show", str(run["id"]), "--db", str(db), cwd=tmp_path).stdout
    assert "compile instructions: none counted (" in shown and "instruction_count: NO" in shown


@pytest.mark.slow
def test_a_case_that_does_not_compile_is_not_counted(tmp_path):
    """A fullgraph error: the count pass is not started; the run says why there is no count."""
    db = tmp_path / "i.db"
    done = diag(
        "run",
        "--case",
        "dynamic_slice",
        *small(new_tokens=3, prompt_length=4),
        "--count-instructions",
        "--db",
        str(db),
        "--json",
        cwd=tmp_path,
    )
    (listed,) = json.loads(done.stdout)
    run = show(db, listed["id"], tmp_path)
    assert run["status"] == "fullgraph_error" and run["compile_instructions"] is None
    if run["instructions_method"] is not None:
        said = "not counted: the diagnosis found no compile that completes (fullgraph_error)"
        assert run["instructions_note"] == said


def _fake_valgrind(tmp_path: Path, body: str) -> dict:
    """A ``valgrind`` first on PATH that runs ``body`` (sh) in place of callgrind: the one stand-in,
    for a valgrind that misbehaves, which the real one does not do on demand. Skips on a host whose
    CPU counter is the method (callgrind is then never started)."""
    from diag.probe import compat

    if compat.instruction_counter()[0]:
        pytest.skip("this host counts with the CPU's counter: callgrind is never started")
    folder = tmp_path / "bin"
    folder.mkdir()
    fake = folder / "valgrind"
    fake.write_text("#!/bin/sh\n" + body)
    fake.chmod(0o755)
    return {"PATH": f"{folder}:{os.environ['PATH']}", "DIAG_PROBE_PARENT": "0"}


@pytest.mark.slow
def test_a_valgrind_that_exits_at_once_is_said_with_its_own_words(tmp_path):
    """valgrind refusing to start: the count pass's exit and valgrind's message are the note; the
    supervisor never dies on a child it cannot wait for, and the run is stored as it ran."""
    env = _fake_valgrind(tmp_path, 'echo "valgrind: Unknown option: --collect-atstart=no" >&2\nexit 1\n')
    _, run = _counted_run(tmp_path, env_extra=env)
    assert run["instructions_method"] == "callgrind"
    assert run["status"] == "pass" and run["compile_instructions"] is None
    note = run["instructions_note"]
    assert "exited with code 1" in note and "Unknown option: --collect-atstart=no" in note, note
    written = "".join(p.read_text(errors="replace") for p in Path(run["artifacts_dir"]).glob("*.txt"))
    assert "ChildProcessError" not in written


@pytest.mark.slow
def test_a_callgrind_total_beyond_what_sqlite_holds_is_said_and_the_run_stored(tmp_path):
    """A total of 10^23 (a damaged or foreign callgrind file): no count, a note, the run stored, the
    matrix goes on."""
    body = (
        'out=""\nfor arg in "$@"; do case "$arg" in --callgrind-out-file=*) out="${arg#*=}";; esac; done\n'
        'while [ "${1#--}" != "$1" ]; do shift; done\n'
        '"$@"; code=$?\nprintf "events: Ir\\ntotals: 100000000000000000000000\\n" > "$out"\nexit $code\n'
    )
    _, run = _counted_run(tmp_path, env_extra=_fake_valgrind(tmp_path, body))
    assert run["instructions_method"] == "callgrind"
    assert run["status"] == "pass" and run["compile_instructions"] is None
    assert "100000000000000000000000 instructions, which is no count" in run["instructions_note"]
