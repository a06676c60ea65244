"""The Llama every case shares: weights, prompt, a functional forward, and the oracle.

Cases that manage their own KV cache (append_last, dynamic_slice) reuse the
weights and submodules of transformers' LlamaForCausalLM and replace only the
attention bookkeeping, so in eager mode they must produce exactly the tokens of
transformers' own greedy ``generate``.

Imports: standard library, torch, transformers.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F

from diag.probe.spec import TINY_LLAMA

# Random weights give near-uniform logits whose top two can tie within float
# noise; scaling the output projection separates them so that an argmax flip
# means a real numerical difference, not a different reduction order.
LOGIT_SHARPEN = 50.0


def build_model(model_path: Optional[str], dtype: torch.dtype, device: str, seed: int):
    """A LlamaForCausalLM in eval mode: from ``model_path``, or small and random with ``seed``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    model: Any
    if model_path:
        model = LlamaForCausalLM.from_pretrained(model_path, torch_dtype=dtype)
    else:
        torch.manual_seed(seed)
        sizes: dict[str, Any] = dict(TINY_LLAMA)
        model = LlamaForCausalLM(LlamaConfig(**sizes))
        with torch.no_grad():
            model.lm_head.weight.mul_(LOGIT_SHARPEN)
        model = model.to(dtype)
    model = model.to(device).eval()
    # Greedy decoding runs exactly new_tokens steps: an EOS must not stop the oracle early.
    model.generation_config.eos_token_id = None
    return model


def make_prompt(batch_size: int, prompt_length: int, vocab_size: int, seed: int, device: str):
    """Seeded prompt ids and attention mask; rows after the first are left-padded."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, vocab_size, (batch_size, prompt_length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    for row in range(batch_size):
        pad = (row * prompt_length) // (2 * batch_size)
        input_ids[row, :pad] = 0
        attention_mask[row, :pad] = 0
    return input_ids.to(device), attention_mask.to(device)


def prefill_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids of a left-padded prompt, as transformers' generate computes them."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def padding_bias(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive bias (batch, 1, 1, keys): 0 where attended, the dtype's minimum elsewhere."""
    blocked = 1.0 - attention_mask[:, None, None, :].to(dtype)
    return blocked * torch.finfo(dtype).min


def project_qkv(layer, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """Queries, keys and values (batch, heads, tokens, head_dim) of one decoder layer, rotated."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    attn = layer.self_attn
    batch, tokens, _ = hidden.shape
    normed = layer.input_layernorm(hidden)
    shape = (batch, tokens, -1, attn.head_dim)
    query = attn.q_proj(normed).view(shape).transpose(1, 2)
    key = attn.k_proj(normed).view(shape).transpose(1, 2)
    value = attn.v_proj(normed).view(shape).transpose(1, 2)
    query, key = apply_rotary_pos_emb(query, key, cos, sin)
    return query, key, value


def attend(layer, hidden: torch.Tensor, query, keys, values, bias: torch.Tensor) -> torch.Tensor:
    """The rest of a decoder layer: SDPA over ``keys``/``values`` with ``bias``, then the MLP."""
    from transformers.models.llama.modeling_llama import repeat_kv

    attn = layer.self_attn
    groups = attn.num_key_value_groups
    # transformers < 4.48 keeps no ``scaling`` on the attention module; the default is head_dim ** -0.5.
    scale = getattr(attn, "scaling", attn.head_dim**-0.5)
    # SDPA's own default is 1/sqrt(head dim), Llama's scaling; torch 2.0's SDPA takes no ``scale``.
    extra = {} if abs(scale - query.shape[-1] ** -0.5) < 1e-12 else {"scale": scale}
    out = F.scaled_dot_product_attention(
        query, repeat_kv(keys, groups), repeat_kv(values, groups), attn_mask=bias, **extra
    )
    batch, _, tokens, _ = query.shape
    hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(batch, tokens, -1))
    return hidden + layer.mlp(layer.post_attention_layernorm(hidden))


def rotary(model, hidden: torch.Tensor, position_ids: torch.Tensor):
    return model.model.rotary_emb(hidden, position_ids)


def head(model, hidden: torch.Tensor) -> torch.Tensor:
    return model.lm_head(model.model.norm(hidden))


# The helpers read the rotary embedding from the model (LlamaModel.rotary_emb) and import
# apply_rotary_pos_emb and repeat_kv from transformers' Llama module, as transformers lays them out
# from 4.45 on (the probe extra's floor); before that each attention layer held its own rotary.
HELPERS_NEED = "4.45"


class OldTransformers(RuntimeError):
    """The installed transformers lays Llama out as these helpers do not read it."""


def check_layout(model) -> None:
    """OldTransformers, naming the transformers the helpers need, before a case runs on an older one."""
    if not hasattr(getattr(model, "model", None), "rotary_emb"):
        import transformers

        raise OldTransformers(
            f"diag's Llama helpers (diag.probe.llama, used by append_last and dynamic_slice) need transformers "
            f">= {HELPERS_NEED} (LlamaModel.rotary_emb); this environment has {transformers.__version__}: "
            f"run with --with 'transformers>={HELPERS_NEED}'"
        )


def prefill(model, input_ids: torch.Tensor, attention_mask: torch.Tensor):
    """Full causal forward over the prompt with no cache: (logits, keys per layer, values per layer)."""
    check_layout(model)
    tokens = input_ids.shape[1]
    hidden = model.model.embed_tokens(input_ids)
    cos, sin = rotary(model, hidden, prefill_positions(attention_mask))
    causal = torch.ones(tokens, tokens, dtype=torch.bool, device=input_ids.device).tril()
    allowed = causal[None, None] & attention_mask.bool()[:, None, None, :]
    bias = torch.zeros(allowed.shape, dtype=hidden.dtype, device=hidden.device)
    bias = bias.masked_fill(~allowed, torch.finfo(hidden.dtype).min)
    keys, values = [], []
    for layer in model.model.layers:
        query, key, value = project_qkv(layer, hidden, cos, sin)
        keys.append(key)
        values.append(value)
        hidden = attend(layer, hidden, query, key, value, bias)
    return head(model, hidden), keys, values


def reference_tokens(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, new_tokens: int):
    """The oracle: transformers' greedy ``generate``, new tokens only, shape (batch, new_tokens)."""
    out = model.generate(
        input_ids,
        attention_mask=attention_mask,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=0,
    )
    return out[:, input_ids.shape[1] :]


def preallocate(prompt_states: list, slots: int) -> list:
    """Per layer, a zeroed (batch, heads, slots, head_dim) cache holding the prompt's states first."""
    caches = []
    for states in prompt_states:
        cache = states.new_zeros((*states.shape[:2], slots, states.shape[-1]))
        cache[:, :, : states.shape[2]] = states
        caches.append(cache)
    return caches


def prefill_into_cache(gen):
    """The uncompiled prefill both cache-managing cases start with.

    Returns the first generated token, per-layer key and value caches of
    ``gen.max_length`` slots holding the prompt's states, a cache mask that
    marks the prompt's real tokens, and the position ids of the next token.
    """
    prompt_mask = gen.attention_mask
    logits, prompt_keys, prompt_values = prefill(gen.model, gen.input_ids, prompt_mask)
    token = gen.emit(logits[:, -1])
    key_cache = preallocate(prompt_keys, gen.max_length)
    value_cache = preallocate(prompt_values, gen.max_length)
    cache_mask = prompt_mask.new_zeros(gen.batch_size, gen.max_length)
    cache_mask[:, : gen.prompt_length] = prompt_mask
    position_ids = prefill_positions(prompt_mask)[:, -1:] + 1
    return token, key_cache, value_cache, cache_mask, position_ids
