"""The seed's own setting on a GPU machine, in one command: races of append_last against
dynamic_slice and hf_static_cache with --profile, bf16, inductor default and reduce-overhead,
batch 1 and 4; then one run of each case with peak memory. Writes a Markdown summary.

    python bench/gpu.py --out gpu.md            # on a CUDA machine (about 8 minutes)
    python bench/gpu.py --cpu --out cpu.md      # the CPU form the tests run: eager backend, float32, batch 1

dynamic_slice's data-dependent slice cannot be one graph, so every leg runs without fullgraph: the
question is how fast each variant's compiled step is and where the time goes, not whether it compiles.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, environ, timed

from diag.verdicts import why

CASES = ["append_last", "dynamic_slice", "hf_static_cache"]


def legs(cpu: bool) -> list[tuple[str, list[str]]]:
    """(label, diag race options) of each leg."""
    if cpu:
        return [("eager backend, float32, batch 1", ["--backend", "eager", "--dtype", "float32", "--batch-size", "1"])]
    found = []
    for mode in ("default", "reduce-overhead"):
        for batch in ("1", "4"):
            options = ["--backend", "inductor", "--dtype", "bfloat16", "--batch-size", batch, "--device", "cuda"]
            found.append((f"inductor {mode}, bf16, batch {batch}", [*options, "--mode", mode]))
    return found


def _race(work: Path, options: list[str], seconds: str) -> dict:
    cases = [a for c in CASES for a in ("--case", c)]
    command = [sys.executable, "-m", "diag", "race", *cases, *options, "--no-fullgraph", "--profile"]
    _, out = timed([*command, "--timing-seconds", seconds, "--db", str(work / "gpu.db"), "--json"], environ(), work)
    (raced,) = json.loads(out)["races"]
    return raced


def _leg_lines(label: str, raced: dict) -> list[str]:
    lines = [
        f"### {label}",
        "",
        "| variant / append_last | ratio (95%) | verdict | between steps ms | top groups | kernels |",
    ]
    lines.append("|---|---|---|---|---|---|")
    between = raced.get("between_ms") or {}
    for verdict in raced["verdicts"]:
        name = verdict["b"]
        if verdict.get("error"):
            lines.append(f"| {name} | - | not raced: {verdict['error']['error_type']} | - | - | - |")
            continue
        found = (raced.get("profile") or {}).get(name) or {}
        groups = "; ".join(f"{g['name']} {g['diff_ms']:+.3f}" for g in (found.get("groups") or [])[:3])
        kernels = "; ".join(f"{case}: {', '.join(ran) or 'none'}" for case, ran in (found.get("kernels") or {}).items())
        ratio = f"x{verdict['ratio']:.3f} ({verdict['low']:.3f}-{verdict['high']:.3f})" if verdict.get("ratio") else "-"
        steps = " / ".join("-" if between.get(c) is None else f"{between[c]:.3f}" for c in (name, "append_last"))
        lines.append(f"| {name} | {ratio} | {verdict['verdict']} | {steps} | {groups} | {kernels} |")
    refused: dict[str, list[str]] = {}
    for found in (raced.get("profile") or {}).values():
        for case, by_kernel in (found.get("refused") or {}).items():
            refused[case] = why.refusal_lines(by_kernel or {})
    lines.append("")
    lines += [f"- {case}: {line}" for case, said in refused.items() for line in said]
    return [*lines, ""]


def _memory(work: Path, options: list[str]) -> list[str]:
    lines = ["### Peak memory (one run each)", "", "| case | eager MB | compiled MB | kind |", "|---|---|---|---|"]
    for case in CASES:
        command = [sys.executable, "-m", "diag", "run", "--case", case, *options, "--no-fullgraph", "--json"]
        _, out = timed([*command, "--db", str(work / "memory.db"), "--timing-seconds", "0.2"], environ(), work)
        (listed,) = json.loads(out)
        shown = json.loads(
            timed(
                [sys.executable, "-m", "diag", "show", str(listed["id"]), "--db", str(work / "memory.db"), "--json"],
                environ(),
                work,
            )[1]
        )
        eager, compiled = (shown.get(f"peak_mem_{mode}_mb") for mode in ("eager", "compiled"))
        said = ["-" if mb is None else f"{mb:.1f}" for mb in (eager, compiled)]
        lines.append(f"| {case} | {said[0]} | {said[1]} | {shown.get('memory_kind') or '-'} |")
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="the CPU form: eager backend, float32, batch 1")
    parser.add_argument("--out", type=Path, default=REPO / "gpu-bench.md")
    parser.add_argument("--timing-seconds", default="1")
    args = parser.parse_args()
    start = time.perf_counter()
    lines = ["# bench/gpu.py", ""]
    with tempfile.TemporaryDirectory(prefix="diag-bench-gpu-") as tmp:
        work = Path(tmp)
        chosen = legs(args.cpu)
        for label, options in chosen:
            lines += _leg_lines(label, _race(work, options, args.timing_seconds))
            print(f"{label}: done at {time.perf_counter() - start:.0f} s", flush=True)
        lines += _memory(work, chosen[0][1])
    lines.append(f"Took {time.perf_counter() - start:.0f} s.")
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
