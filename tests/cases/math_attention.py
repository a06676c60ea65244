"""append_last with scaled_dot_product_attention held to its math backend
(torch.nn.attention.sdpa_kernel) around each compiled decode step: against append_last, the race's
profile must name two different attention kernels."""

from diag.cases.append_last import decode_step, drive
from diag.probe.cases import case


@case("math_attention", "append_last with SDPA forced to its math backend")
def generate(gen):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    step = gen.compile(decode_step)

    def on_math(*args):
        with sdpa_kernel(SDPBackend.MATH):
            return step(*args)

    drive(gen, on_math)
