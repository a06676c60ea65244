"""When the diagnosis pass may take the timing pass's compiled graphs from the caches (diagnose.reuse_decision).

Every branch on real results files written with the probe's own record writer; the end-to-end proof
with real inductor compiles is in tests/test_inductor.py.
"""

from __future__ import annotations

import pytest

from diag.probe import diagnose, records

CACHES = ["fx_graph_cache", "enable_autograd_cache"]


def _timing(tmp_path, **compiled) -> object:
    path = tmp_path / "time.jsonl"
    with records.Writer(path) as writer:
        writer.write(
            records.TIMING,
            mode="eager",
            memory_kind="rss_high_water",
            peak_memory_mb=1.0,
            totals_s=[],
            step_samples_s=[],
            host_samples_s=[],
        )
        if compiled:
            writer.write(
                records.TIMING,
                mode="compiled",
                memory_kind="rss_high_water",
                peak_memory_mb=1.0,
                totals_s=[],
                step_samples_s=[],
                host_samples_s=[],
                **compiled,
            )
        else:
            writer.write(records.TIMING_ERROR, mode="compiled", error_type="Unsupported", error_message="x")
    return path


def test_reused_only_where_the_timing_pass_lowered_everything_and_torch_said_nothing(tmp_path):
    clean = _timing(tmp_path, compile_notices=[], graph_cache_hits=0)
    reuse, why = diagnose.reuse_decision(clean, True, "inductor", CACHES)
    assert reuse and "inductor's FX graph cache and AOTAutograd's cache" in why and "--no-reuse-compiled" in why


@pytest.mark.parametrize(
    "compiled, allowed, backend, caches, expected",
    [
        ({"compile_notices": [], "graph_cache_hits": 0}, True, "aot_eager", CACHES, "no inductor lowering"),
        ({"compile_notices": [], "graph_cache_hits": 0}, False, "inductor", CACHES, "--no-reuse-compiled"),
        (
            {"compile_notices": [], "graph_cache_hits": 0},
            True,
            "inductor",
            ["enable_autograd_cache"],
            "keeps inductor's FX graph cache off",
        ),
        ({}, True, "inductor", CACHES, "did not finish a compiled generation"),
        ({"compile_notices": [], "graph_cache_hits": 3}, True, "inductor", CACHES, "served 3 graph(s) from a cache"),
        (
            {
                "compile_notices": [
                    {"logger": "torch._inductor.lowering", "level": "WARNING", "exception": "KeyError"}
                ],
                "graph_cache_hits": 0,
            },
            True,
            "inductor",
            CACHES,
            "WARNING torch._inductor.lowering (KeyError)",
        ),
        ({"compile_s": 1.0}, True, "inductor", CACHES, "could not tell"),  # a probe from before the notices
    ],
    ids=[
        "other-backend",
        "asked-not-to",
        "fx-cache-off",
        "compile-failed",
        "cache-served-timing",
        "torch-warned",
        "old-probe",
    ],
)
def test_every_graph_is_lowered_again_otherwise(tmp_path, compiled, allowed, backend, caches, expected):
    reuse, why = diagnose.reuse_decision(_timing(tmp_path, **compiled), allowed, backend, caches)
    assert not reuse and expected in why


def test_no_timing_pass_means_no_reuse():
    reuse, why = diagnose.reuse_decision(None, True, "inductor", CACHES)
    assert not reuse and "no timing pass" in why
