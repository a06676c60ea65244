"""append_last's decode step reached through a helper with a default tensor argument.

Third-party decode code often does this (``def forward(..., scale=torch.ones(()))``). To
inline the helper, dynamo wraps the default tensor; on torch 2.0.1 and the mid-2023 2.1
nightlies that wrapping raised ``TypeError: VariableBuilder.__init__() got an unexpected
keyword argument 'guards'``, which dynamo caught and reported only as ``Unsupported: arg
mismatch inlining``. Fullgraph must fail on those builds, with both messages recorded.
"""

import torch

from diag.cases.append_last import decode_step, drive
from diag.probe.cases import case

NO_SCALE = torch.ones(())


def scaled_step(model, token, position_ids, key_cache, value_cache, cache_mask, scale=NO_SCALE):
    return decode_step(model, token, position_ids, key_cache, value_cache, cache_mask) * scale


def forward(model, token, position_ids, key_cache, value_cache, cache_mask):
    return scaled_step(model, token, position_ids, key_cache, value_cache, cache_mask)


@case("default_tensor_arg", "append_last through a helper whose default argument is a tensor")
def generate(gen):
    drive(gen, gen.compile(forward))
