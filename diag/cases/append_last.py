"""Fixed-size KV cache; each decode step appends the current token's K/V in the last slot.

The seed experiment: prefill runs uncompiled with dynamic shapes and no cache.
Then a cache of max_length slots and a mask are allocated. The compiled decode
step writes the current token's K/V into the last slot and attends over the
whole cache with an explicit mask, so its shapes never change. Between steps
the loop moves the last slot into the token's permanent position.
"""

from diag.probe import llama
from diag.probe.cases import case


def decode_step(model, token, position_ids, key_cache, value_cache, cache_mask):
    hidden = model.model.embed_tokens(token)
    cos, sin = llama.rotary(model, hidden, position_ids)
    bias = llama.padding_bias(cache_mask, hidden.dtype)
    for layer, keys, values in zip(model.model.layers, key_cache, value_cache):
        query, key, value = llama.project_qkv(layer, hidden, cos, sin)
        keys[:, :, -1:] = key
        values[:, :, -1:] = value
        hidden = llama.attend(layer, hidden, query, keys, values, bias)
    return llama.head(model, hidden)


@case("append_last", "fixed-size KV cache, current token in the last slot, whole cache masked (fullgraph-friendly)")
def generate(gen):
    drive(gen, gen.compile(decode_step))


def drive(gen, step):
    """The append-last decode loop around ``step`` (decode_step's signature), compiled or not."""
    token, key_cache, value_cache, cache_mask, position_ids = llama.prefill_into_cache(gen)
    cache_mask[:, -1] = 1  # the last slot holds the current token during every decode step
    for index in gen.steps():
        logits = step(gen.model, token, position_ids, key_cache, value_cache, cache_mask)
        slot = gen.prompt_length + index
        for keys, values in zip(key_cache, value_cache):
            keys[:, :, slot] = keys[:, :, -1]
            values[:, :, slot] = values[:, :, -1]
        cache_mask[:, slot] = 1
        token = gen.emit(logits[:, -1])
        position_ids = position_ids + 1
