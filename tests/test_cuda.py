"""The CUDA code path (device placement, synchronised CUDA-event timing, max-allocated memory).

No GPU exists on the test machines, so this skips there; it runs where torch sees a GPU.
"""

from __future__ import annotations

import pytest
import torch
from conftest import diag, show


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_append_last_on_cuda_in_bf16(tmp_path):
    db = tmp_path / "cuda.db"
    diag(
        "run",
        "--case",
        "append_last",
        "--device",
        "cuda",
        "--dtype",
        "bfloat16",
        "--fullgraph",
        "--new-tokens",
        "6",
        "--repeats",
        "2",
        "--db",
        str(db),
        cwd=tmp_path,
    )
    run = show(db, 1, tmp_path)
    assert run["status"] == "pass"
    assert run["memory_kind"] == "cuda_max_allocated"
    assert run["compiled_ms_per_token"] > 0
    assert run["build_variant"].startswith("cu")
