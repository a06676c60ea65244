"""append_last with scaled_dot_product_attention held to its math backend
(torch.nn.attention.sdpa_kernel) around each compiled decode step, unless DIAG_TEST_SDPA is
"default": against append_last, or against itself run the other way, the profile must name two
different attention kernels.

With DIAG_TEST_REFUSALS=1 the probe is made to ask torch's CUDA kernel checks, which a CPU build
answers with a bare False. A flash check stands in for them: it refuses a mask, warning the
message torch 2.14.1's libtorch_cuda.so carries, so that what the probe asks, parses and stores,
and what diag shows, run end to end without a GPU."""

import contextlib
import os
import warnings

from diag.cases.append_last import decode_step, drive
from diag.probe import attribution
from diag.probe.cases import case

FLASH_MASK = "Flash Attention does not support non-null attn_mask."
WHERE = " (Triggered internally at /pytorch/aten/src/ATen/native/transformers/cuda/sdp_utils.cpp:{}.)"


def _flash(params, debug):
    if params.attn_mask is not None:
        if debug:
            warnings.warn(FLASH_MASK + WHERE.format(272), stacklevel=2)
        return False
    return True


def _efficient(params, debug):
    return True  # the memory-efficient kernel takes a mask and float32


if os.environ.get("DIAG_TEST_REFUSALS") == "1":
    attribution.refusal_checks = lambda workload: [("flash", _flash), ("memory-efficient", _efficient)]


@case("math_attention", "append_last with SDPA forced to its math backend")
def generate(gen):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    step = gen.compile(decode_step)
    forced = os.environ.get("DIAG_TEST_SDPA", "math") != "default"

    def on_math(*args):
        with sdpa_kernel(SDPBackend.MATH) if forced else contextlib.nullcontext():
            return step(*args)

    drive(gen, on_math)
