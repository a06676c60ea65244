"""A decode step recompiled past a lowered recompile limit (run with --dynamic false): each new
sequence length fails a shape guard, and on the third torch refuses to compile the frame again. Without
fullgraph the frame then runs eagerly (one frame given up, named by two of torch's loggers); with
fullgraph the call raises."""

import torch

from diag.probe.cases import case

from _greedy import full_forward, greedy


@case("recompile_limit", "a decode step recompiled past a recompile limit of 2")
def generate(gen):
    config = torch._dynamo.config
    setattr(config, "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit", 2)
    greedy(gen, gen.compile(full_forward))
