"""append_last with scaled_dot_product_attention held to its math backend
(torch.nn.attention.sdpa_kernel) around each compiled decode step, unless DIAG_TEST_SDPA is
"default": against append_last, or against itself run the other way, the profile must name two
different attention kernels."""

import contextlib
import os

from diag.cases.append_last import decode_step, drive
from diag.probe.cases import case


@case("math_attention", "append_last with SDPA forced to its math backend")
def generate(gen):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    step = gen.compile(decode_step)
    forced = os.environ.get("DIAG_TEST_SDPA", "math") != "default"

    def on_math(*args):
        with sdpa_kernel(SDPBackend.MATH) if forced else contextlib.nullcontext():
            return step(*args)

    drive(gen, on_math)
