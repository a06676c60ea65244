"""Greedy decoding through transformers' own model forward and Cache classes.

transformers renamed the forward's cache argument (``past_key_values`` became
``cache`` in 5.x, with ``cache_position`` dropped) and changed StaticCache's
constructor several times; the helpers here follow the installed version by
inspecting signatures, not by comparing version numbers.

Imports: standard library, torch, transformers.
"""

from __future__ import annotations

import inspect
from typing import Any, Optional

import torch

from diag.probe import llama
from diag.probe.tiny import tiny_config


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


def architectures() -> list[str]:
    """Every model_type the installed transformers has a causal-LM class for, decoder-only ones
    (encoder-decoder configs are left out), sorted."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    found = []
    for model_type in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        try:
            config = AutoConfig.for_model(model_type)
        except Exception:  # a mapping entry whose config the installed release cannot build
            continue
        if not getattr(config, "is_encoder_decoder", False):
            found.append(model_type)
    return found


def tiny_model(model_type: str, dtype, device: str, seed: int):
    """A random ``model_type`` causal LM of ``tiny_config``, seeded, in eval mode."""
    torch.manual_seed(seed)
    model = _causal_lm(tiny_config(model_type), seed)
    languages = getattr(model.config, "languages", None)
    if callable(getattr(model, "set_default_language", None)) and languages:
        model.set_default_language(list(languages)[0])  # xmod's adapters need one to route through
    return model.to(device=device, dtype=dtype).eval()


def _causal_lm(config, seed: int):
    """The architecture's causal-LM class made from ``config``; where the class refuses a multimodal
    config, from its text config, the one the class is declared for (emu3, llama4, qwen3_5 in
    releases whose class does not pick the text config out itself)."""
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_config(config)
    except Exception:
        declared: Any
        try:
            declared = AutoModelForCausalLM._model_mapping[type(config)]
        except Exception:  # no class to ask: the first refusal is the answer
            declared = None
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        if declared is None or text is config or not isinstance(text, declared.config_class):
            raise
    torch.manual_seed(seed)
    return declared(text)


def _no_auto_compile() -> dict:
    """``generate``'s switch off its own compile of the forward, where this transformers has one.

    With a static cache, transformers' ``generate`` compiles the forward by itself (on CUDA and other
    accelerators, or everywhere when the model's generation config asks for it), with its own
    options. diag compiles the forward with the run's --backend and --mode, so that is turned off:
    the compile that runs is the one the run names. (transformers before the switch existed,
    4.50, had no such compile on a static cache in the versions diag was run with.)"""
    from transformers import GenerationConfig

    return {"disable_compile": True} if hasattr(GenerationConfig(), "disable_compile") else {}


def decode(model, prompt, attention_mask, new_tokens: int, cache: Optional[str] = "static"):
    """transformers' greedy ``generate`` of exactly ``new_tokens`` with a static cache (``cache=None``:
    the cache the model's own ``generate`` picks), without transformers' own compile of the forward
    (``_no_auto_compile``); the mask is passed where the model's forward takes one (state-space and
    some older models refuse it)."""
    # the class's forward: inside gen.watch the instance's is a wrapper taking *args, **kwargs
    masked = {"attention_mask": attention_mask} if "attention_mask" in _parameters(type(model).forward) else {}
    return model.generate(
        prompt,
        **masked,
        **_no_auto_compile(),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        **({"cache_implementation": cache} if cache else {}),
        pad_token_id=model.config.pad_token_id,
    )


def static_generate(gen, model_type: str) -> None:
    """transformers' own decode of a tiny random ``model_type``: ``generate`` with a static cache and
    the model's forward compiled, the path transformers recommends for compiled generation."""

    def make():
        return tiny_model(model_type, gen.model.dtype, gen.model.device, gen.seed)

    model = make()
    vocab = int(
        model.config.get_text_config().vocab_size
        if hasattr(model.config, "get_text_config")
        else model.config.vocab_size
    )
    generator = torch.Generator().manual_seed(gen.seed)
    prompt = torch.randint(3, vocab, (gen.batch_size, gen.prompt_length), generator=generator).to(gen.model.device)
    gen.use(model=model, input_ids=prompt)
    refused = static_cache_refused(make, prompt, gen.attention_mask)  # on a model of its own
    if refused:
        gen.note(
            f"this transformers' generate fails on {model_type} with a static cache, eagerly ({refused}): "
            "decoded with the cache its generate picks by itself"
        )
    with gen.watch(model):
        gen.chosen(decode(model, prompt, gen.attention_mask, gen.new_tokens, cache=None if refused else "static"))


def static_cache_refused(make, prompt, attention_mask) -> Optional[str]:
    """Why this transformers' ``generate`` with a static cache fails uncompiled on the model ``make()``
    builds (a prefill and one decode step; the exception's type and first line), or None where it works.

    Some releases' static cache has no layer for a hybrid model's state-space layers or hands a 4-D
    mask to a forward that takes 2-D ones; a compiled run would then measure transformers' failure,
    not torch's. Run before anything is compiled, so that it leaves nothing in the run's logs, and on
    a model of its own: a first forward may change the model (big_bird switches its sparse attention
    to full attention on a short prompt, and warns), and the compiled generation must trace the model
    as the case built it, as a user's first compiled call would."""
    try:
        decode(make(), prompt, attention_mask, 2)
    except Exception as exc:  # transformers' own code: any exception says the path is not usable
        first = (str(exc).strip().splitlines() or [""])[0]
        return f"{type(exc).__name__}: {first[:160]}"
    return None
