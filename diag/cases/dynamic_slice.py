"""Preallocated KV cache sliced to the valid length before attention.

The baseline append_last was compared against: a tensor ``valid_past_index``
says where the current token goes; each step writes there and slices the
cache to ``[..., :valid_past_index + 1, :]`` before SDPA. The slice length
depends on tensor data, so the attention shapes grow every step.
"""

import torch

from diag.probe import llama
from diag.probe.cases import case


def decode_step(model, token, position_ids, key_cache, value_cache, cache_mask, valid_past_index):
    hidden = model.model.embed_tokens(token)
    cos, sin = llama.rotary(model, hidden, position_ids)
    cache_mask[:, valid_past_index] = 1
    bias = llama.padding_bias(cache_mask[:, : valid_past_index + 1], hidden.dtype)
    for layer, k, v in zip(model.model.layers, key_cache, value_cache):  # one layer's key and value cache
        q, key, value = llama.project_qkv(layer, hidden, cos, sin)
        k.index_copy_(2, valid_past_index.view(1), key)
        v.index_copy_(2, valid_past_index.view(1), value)
        hidden = llama.attend(layer, hidden, q, k[:, :, : valid_past_index + 1], v[:, :, : valid_past_index + 1], bias)
    return llama.head(model, hidden)


@case("dynamic_slice", "preallocated KV cache sliced to a tensor-valued length before SDPA (data-dependent shapes)")
def generate(gen):
    drive(gen, gen.compile(decode_step))


def drive(gen, step):
    """The dynamic-slice decode loop around ``step`` (decode_step's signature), compiled or not."""
    token, key_cache, value_cache, cache_mask, position_ids = llama.prefill_into_cache(gen)
    valid_past_index = torch.tensor(gen.prompt_length, device=cache_mask.device)
    for _ in gen.steps():
        logits = step(gen.model, token, position_ids, key_cache, value_cache, cache_mask, valid_past_index)
        token = gen.emit(logits[:, -1])
        valid_past_index = valid_past_index + 1
        position_ids = position_ids + 1
