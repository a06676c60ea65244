"""What a user would write by hand: build the model, time eager and compiled decoding, no diagnostics.

    python bench/bare.py CASE BACKEND NEW_TOKENS REPEATS [SECONDS]

Like diag's timing pass, it times at least REPEATS generations per mode after a warmup, and
goes on until the timed ones span SECONDS (default 1, diag run's default --timing-seconds).

It uses the same case loops as diag, so both sides do the same compile and generation.
With TORCH_LOGS set in its environment it is the "debug logs by hand" baseline.
"""

import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from diag.probe import llama  # noqa: E402 (after sys.path names the repository)
from diag.probe.cases import Generation, load_case_file  # noqa: E402 (after sys.path names the repository)


def generate(case, model, ids, mask, new_tokens, compile_fn):
    gen = Generation(model, ids, mask, new_tokens, compile_fn)
    with torch.no_grad():
        case.generate(gen)
    return gen


def main():
    name, backend, new_tokens, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    seconds = float(sys.argv[5]) if len(sys.argv) > 5 else 1.0
    case = load_case_file(str(REPO / "diag" / "cases" / f"{name}.py"))
    model = llama.build_model(None, torch.float32, "cpu", 0)
    ids, mask = llama.make_prompt(1, 16, model.config.vocab_size, 0, "cpu")
    for mode, compile_fn in (
        ("eager", lambda fn: fn),
        ("compiled", lambda fn: torch.compile(fn, backend=backend, fullgraph=True)),
    ):
        samples = []
        start = time.perf_counter()
        try:
            generate(case, model, ids, mask, new_tokens, compile_fn)  # warmup (and the compile)
            timed_since, count = time.perf_counter(), 0
            while count < repeats or time.perf_counter() - timed_since < seconds:
                samples += generate(case, model, ids, mask, new_tokens, compile_fn).step_seconds
                count += 1
        except Exception as exc:  # a fullgraph failure is a result here too, as it is for diag
            print(mode, "failed:", type(exc).__name__, f"{time.perf_counter() - start:.1f} s")
            continue
        print(mode, f"{statistics.median(samples) * 1e3:.3f} ms/token", f"{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
