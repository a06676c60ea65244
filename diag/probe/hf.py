"""Greedy decoding through transformers' own model forward and Cache classes.

transformers renamed the forward's cache argument (``past_key_values`` became
``cache`` in 5.x, with ``cache_position`` dropped) and changed StaticCache's
constructor several times; the helpers here follow the installed version by
inspecting signatures, not by comparing version numbers.

Imports: standard library, torch, transformers.
"""

from __future__ import annotations

import inspect

import torch

from diag.probe import llama


def _parameters(fn) -> set[str]:
    return set(inspect.signature(fn).parameters)


def static_cache(gen):
    from transformers import StaticCache

    wanted = {
        "config": gen.model.config,
        "max_cache_len": gen.max_length,
        # Older releases need the batch size, device and dtype up front.
        "max_batch_size": gen.batch_size,
        "batch_size": gen.batch_size,
        "device": gen.model.device,
        "dtype": gen.model.dtype,
    }
    accepted = _parameters(StaticCache.__init__)
    if "kwargs" in accepted:
        return StaticCache(config=wanted["config"], max_cache_len=wanted["max_cache_len"])
    return StaticCache(**{k: v for k, v in wanted.items() if k in accepted})


def dynamic_cache(gen):
    from transformers import DynamicCache

    if "config" in _parameters(DynamicCache.__init__):
        return DynamicCache(config=gen.model.config)
    return DynamicCache()


def _call(forward, accepted: set[str], token, attention_mask, position_ids, cache, start: int):
    kwargs = dict(input_ids=token, attention_mask=attention_mask, position_ids=position_ids, use_cache=True)
    if "cache" in accepted:
        kwargs["cache"] = cache
    else:
        kwargs["past_key_values"] = cache
    if "cache_position" in accepted:
        kwargs["cache_position"] = torch.arange(start, start + token.shape[1], device=token.device)
    return forward(**kwargs).logits


def greedy(gen, cache, fixed_mask: bool) -> None:
    """Prefill with the plain forward, then decode every step with the compiled forward.

    ``fixed_mask`` passes the attention mask at its full max_length every step
    (future slots set; the causal mask hides them), as a static cache needs
    for fixed shapes; otherwise the mask grows by one column per step, as
    ``generate`` grows it.
    """
    model = gen.model
    accepted = _parameters(model.forward)
    mask = gen.attention_mask
    positions = llama.prefill_positions(mask)
    logits = _call(model.forward, accepted, gen.input_ids, mask, positions, cache, 0)
    token = gen.emit(logits[:, -1])
    position_ids = positions[:, -1:] + 1
    if fixed_mask:
        mask = torch.cat([mask, mask.new_ones(gen.batch_size, gen.new_tokens)], dim=1)
    forward = gen.compile(model.forward)
    for index in gen.steps():
        if not fixed_mask:
            mask = torch.cat([mask, mask.new_ones(gen.batch_size, 1)], dim=1)
        logits = _call(forward, accepted, token, mask, position_ids, cache, gen.prompt_length + index)
        token = gen.emit(logits[:, -1])
        position_ids = position_ids + 1
