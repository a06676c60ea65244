"""A compile whose backend raises TypeError while dynamo's suppress_errors swallows it.

It mirrors the torch 2.1 nightly failure that only DEBUG logs showed:
``VariableBuilder.__init__() got an unexpected keyword argument 'guards'``.
The decode call returns normally (the frame silently runs eagerly).
"""

import torch

from diag.probe.cases import case

from _greedy import full_forward, greedy

MESSAGE = "VariableBuilder.__init__() got an unexpected keyword argument 'guards'"


def failing_backend(graph_module, example_inputs):
    raise TypeError(MESSAGE)


@case("swallowed_error", "backend raises TypeError under suppress_errors; torch falls back silently")
def generate(gen):
    compiled = gen.compile(full_forward) is not full_forward
    if compiled:
        torch._dynamo.config.suppress_errors = True
        step = torch.compile(full_forward, backend=failing_backend)
    else:
        step = full_forward
    greedy(gen, step)
