"""Helpers for the lowering test cases: inductor runs a custom post-grad pass that swallows an
exception and logs it, the way torch's own passes do, while the lowering still succeeds."""

import logging

import torch
from torch._inductor import config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass

from _greedy import full_forward, greedy

MESSAGE = "custom pass could not fuse the attention block"


class SwallowingPass(CustomGraphPass):
    """Raises, catches and logs; leaves the graph as it was. A fixed uuid keeps the graph cacheable."""

    def __init__(self, level: int) -> None:
        self.level = level

    def __call__(self, graph: torch.fx.Graph) -> None:
        try:
            raise RuntimeError(MESSAGE)
        except RuntimeError:
            logging.getLogger("torch._inductor.fx_passes.post_grad").log(
                self.level, "custom post-grad pass failed; the graph is left as it was", exc_info=True
            )

    def uuid(self) -> str:
        return f"diag-test-swallowing-pass-{self.level}"


def generate(gen, level: int) -> None:
    inductor_config.post_grad_custom_post_pass = SwallowingPass(level)
    greedy(gen, gen.compile(full_forward))
