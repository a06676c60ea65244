"""The tiny-config shrink: any transformers decoder architecture's default config made small
enough to decode in seconds on a CPU, and still a model of that architecture.

The shrink sets the tiny sizes on the default config and each config nested in it, fills what a
default leaves unset and every checkpoint gives, keeps what the architecture needs consistent
(heads, MLA parts, state-space widths, layer patterns, vocabularies, per-layer overrides), then has
the config's own class make it again from the fields it changed (``_remade``).

Imports: standard library; transformers in the functions.
"""

from __future__ import annotations

# Sizes a tiny random model of any decoder architecture gets, where its config has the field.
# Names differ between architectures (n_embd, n_layer ...): every spelling is set where present.
TINY_SIZES = {
    "vocab_size": 512,
    "hidden_size": 64,
    "n_embd": 64,
    "d_model": 64,
    "intermediate_size": 128,
    "n_inner": 128,
    "ffn_hidden_size": 128,  # dbrx's feed-forward config (5.5 reads its router width from it)
    "ffn_dim": 128,
    "num_hidden_layers": 2,
    "n_layer": 2,
    "num_layers": 2,
    "num_attention_heads": 4,
    "n_head": 4,
    "num_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 256,
    "n_positions": 256,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "kv_lora_rank": 16,
    "q_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    # qwen4_exp's token indexer: one key head, a budget that its compression ratio divides
    "indexer_n_heads": 2,
    "indexer_kv_heads": 1,
    "indexer_head_dim": 16,
    "indexer_budget": 8,
    "indexer_compress_ratio": 4,
}


# Sizes a default config may leave None that its model reads as a number (a checkpoint always gives
# them): head_dim (ministral, hunyuan), the kv head count (nemotron), the experts per token (deepseek_v2),
# the token indexer's sizes (qwen4_exp builds the indexer whether or not they are set).
UNSET_MEANS_REQUIRED = frozenset(
    {
        "head_dim",
        "num_key_value_heads",
        "num_experts_per_tok",
        "n_routed_experts",
        "n_shared_experts",
        "indexer_n_heads",
        "indexer_kv_heads",
        "indexer_head_dim",
        "indexer_budget",
        "indexer_compress_ratio",
    }
)


def _configs(config) -> list:
    """The config and each config nested in it (the text config of a multimodal model, blt's patcher,
    encoder, decoder and global ones): each is shrunk alike."""
    from transformers import PretrainedConfig

    found = [config]
    for name in sorted(_fields(config)):
        value = _get(config, name)
        if isinstance(value, PretrainedConfig) and all(value is not seen for seen in found):
            found.append(value)
    text = _get(config, "text_config")
    if text is not None and all(text is not seen for seen in found):
        found.append(text)
    return found


def _hidden_multiples(target, fields: set[str]) -> dict[str, int]:
    """Sizes the default config derived from its hidden size when it was made (rwkv's
    attention_hidden_size, xlstm's embedding_dim, zamba2's attention_hidden_size at twice it): each
    name and its multiple of the hidden size, to be made again from the tiny one."""
    hidden = _get(target, "hidden_size")
    if not isinstance(hidden, int) or hidden <= 0:
        return {}
    found = {}
    for name in fields - set(TINY_SIZES):
        value = _get(target, name)
        sized = any(word in name for word in ("hidden", "embedding_dim", "embed_dim"))
        if sized and isinstance(value, int) and not isinstance(value, bool) and value in (hidden, 2 * hidden):
            found[name] = value // hidden
    return found


# state-space layers whose heads times head size must be the expanded hidden size: (heads, head size, expand)
STATE_SPACE_HEADS = (
    ("num_heads", "head_dim", "expand"),
    ("mamba_n_heads", "mamba_d_head", "mamba_expand"),
    ("n_mamba_heads", "mamba_headdim", "mamba_expand"),
)


def _consistent_state_space(target) -> None:
    """A state-space (mamba2) layer's heads made to tile its expanded tiny hidden size, and a hybrid
    whose default pattern has no attention layer in the tiny depth given one (jamba's period and
    offset, bamba's attention indices): the static cache and the report need one to measure."""
    hidden = _get(target, "hidden_size")
    for heads, size, expand in STATE_SPACE_HEADS:
        factor = _get(target, expand)
        if isinstance(hidden, int) and isinstance(factor, (int, float)) and _get(target, heads) is not None:
            width = int(factor * hidden)
            _set(target, size, 16)
            _set(target, heads, max(1, width // 16))
            if isinstance(_get(target, "mamba_d_ssm"), int):
                _set(target, "mamba_d_ssm", width)  # falcon_h1 names the width apart
    if isinstance(_get(target, "attn_layer_period"), int) and isinstance(_get(target, "attn_layer_offset"), int):
        _set(target, "attn_layer_period", 2)
        _set(target, "attn_layer_offset", 1)
    if "attn_layer_indices" in _fields(target):
        _set(target, "attn_layer_indices", [1])


def _fields(target) -> set[str]:
    """The fields a config holds, None-valued ones included."""
    try:
        return set(target.to_dict())
    except Exception:  # a config whose to_dict fails on a default: its attributes
        return set(vars(target))


def _get(target, name: str):
    """``target.name``, or None where the config has no such field or refuses to give one value for
    it (a per-layer attribute, a property that raises)."""
    try:
        return getattr(target, name, None)
    except Exception:
        return None


def _unset(target, name: str) -> bool:
    """Whether the config holds None for ``name`` (not: refuses to give one value for it, as a
    per-layer attribute does)."""
    try:
        return getattr(target, name) is None
    except Exception:
        return False


def _set(target, name: str, value) -> None:
    try:
        setattr(target, name, value)
    except Exception:  # a read-only property (derived from other fields): those fields shrink it
        pass


def _one_of_each(types: list) -> list:
    """A layer pattern shrunk to one layer of each kind, in order of first appearance (at least two).

    A pattern of linear-attention layers alone gets a full-attention layer (granitemoehybrid's
    default: its model has both, the static cache needs one to measure), under either spelling
    transformers has used for the two (``mamba`` and ``attention`` in older releases); a hybrid layer that
    shares its attention block with the other hybrid layers (zamba ties them to the first) comes twice."""
    kinds = list(dict.fromkeys(types))
    for alone, attention in (("linear_attention", "full_attention"), ("mamba", "attention")):
        if kinds == [alone]:
            kinds.append(attention)
    if "hybrid" in kinds and len(kinds) > 1:
        kinds.append("hybrid")
    return (kinds * 2)[: max(2, len(kinds))]


def tiny_config(model_type: str):
    """The default config of ``model_type``, shrunk to a model that decodes in seconds on a CPU.

    The shrink sets fields on the default config; the config is then made again from the fields it
    changed (``_remade``), so that what the config class derives from them when it is made (hrm_text's
    layers per stack, xlstm's block count, zamba2's hybrid layer ids) follows the tiny sizes, as it does
    for a checkpoint's config."""
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type)
    for target in _configs(config):
        _shrink(target)
    _nested_attention(config)
    if _get(config, "pad_token_id") is None:
        _set(config, "pad_token_id", 0)
    if _get(config, "is_decoder") is False:
        _set(config, "is_decoder", True)  # an encoder architecture's causal-LM class decodes only as a decoder
    return _remade(config, AutoConfig.for_model(model_type))


def _per_layer(value) -> bool:
    """Whether a config field holds per-layer overrides (dots3_note's and gemma4's per_layer_config:
    layer index to the fields that layer sets apart)."""
    if not isinstance(value, dict) or not value:
        return False
    return all(str(layer).isdigit() and isinstance(fields, dict) for layer, fields in value.items())


def _tiny_per_layer(overrides: dict, before: dict, after: dict) -> dict:
    """Per-layer overrides for the tiny depth: each tiny layer takes the overrides of the default's
    first layer of its kind, shrunk (``_shrunk_overrides``, with ``before`` the default's fields and
    ``after`` the tiny ones); none where the kinds are unknown."""
    types, tiny_types = before.get("layer_types"), after.get("layer_types")
    if not isinstance(types, list) or not isinstance(tiny_types, list):
        return {}
    by_index = {int(layer): fields for layer, fields in overrides.items()}
    found = {}
    for layer, kind in enumerate(tiny_types):
        first = types.index(kind) if kind in types else None
        if first in by_index:
            found[str(layer)] = _shrunk_overrides(by_index[first], before, after)
    return found


MLA_PARTS = ("head_dim", "qk_nope_head_dim", "qk_rope_head_dim")


def _shrunk_overrides(overrides: dict, before: dict, after: dict) -> dict:
    """One layer's overrides given the tiny sizes and the same head rules as a whole config. A head
    size that was the sum of MLA's rotary and other parts for that layer stays their sum (dots3_note's
    sliding layers), given explicitly."""
    import types

    layer = types.SimpleNamespace(**overrides)
    _shrink(layer)
    shrunk = {name: getattr(layer, name) for name in overrides}
    was = {name: overrides.get(name, before.get(name)) for name in MLA_PARTS}
    now = {name: shrunk.get(name, after.get(name)) for name in MLA_PARTS}
    parts_were = [v for v in (was[name] for name in MLA_PARTS) if isinstance(v, int)]
    parts_now = [v for v in (now[name] for name in MLA_PARTS) if isinstance(v, int)]
    if len(parts_were) == len(parts_now) == len(MLA_PARTS):
        head, nope, rope = parts_were
        if head == nope + rope:
            shrunk["head_dim"] = parts_now[1] + parts_now[2]
    return shrunk


def _nested_attention(config) -> None:
    """What every checkpoint gives a nested attention config and its default leaves out (dbrx's,
    whose model reads both): the parent's rotary base where the nested config has none of its own,
    and a query-key-value clip where the default's is unset (dbrx's checkpoints clip at 8)."""
    rotary = _get(config, "rope_parameters")
    theta = rotary.get("rope_theta") if isinstance(rotary, dict) else None
    for target in _configs(config)[1:]:
        fields = _fields(target)
        if theta is not None and not {"rope_theta", "rope_parameters"} & fields:
            _set(target, "rope_theta", theta)
        if "clip_qkv" in fields and _unset(target, "clip_qkv"):
            _set(target, "clip_qkv", 8.0)


def _remade(target, default):
    """``target`` made again by its class from the fields in which it differs from ``default`` (nested
    configs made again first); ``target`` as it is where its class refuses them."""
    from transformers import PretrainedConfig

    try:
        before, after = default.to_dict(), target.to_dict()
    except Exception:  # a config whose to_dict fails: kept as the shrink left it
        return target
    changed = {}
    for name, value in after.items():
        if _per_layer(value):
            changed[name] = _tiny_per_layer(value, before, after)
            continue
        if name in ("transformers_version", "model_type") or (name in before and before[name] == value):
            continue
        current, was = _get(target, name), _get(default, name)
        if isinstance(current, PretrainedConfig) and isinstance(was, PretrainedConfig):
            value = _remade(current, was)
        changed[name] = value
    try:
        return type(target)(**changed)
    except Exception:  # the class refuses the combination: the shrunk fields stand as they were set
        return target


def _shrink(target) -> None:
    """One config (or sub-config) made tiny: its sizes, heads, layer patterns, vocabularies."""
    # grouped-query attention keeps a kv head count below the head count; where the architecture
    # uses as many kv heads as heads (multi-head, MLA), so does the tiny model
    same_heads = _get(target, "num_key_value_heads") == _get(target, "num_attention_heads")
    fields = _fields(target)
    derived = _hidden_multiples(target, fields)
    for name, value in TINY_SIZES.items():
        current = _get(target, name)
        if isinstance(current, int) and not isinstance(current, bool):
            _set(target, name, value)
        elif name in UNSET_MEANS_REQUIRED and name in fields and _unset(target, name):
            # a default config that leaves it unset, where every real checkpoint gives it
            _set(target, name, value)
    hidden = _tiny_hidden(target, fields)
    if hidden != TINY_SIZES["hidden_size"]:
        _set(target, "hidden_size", hidden)
    for name, multiple in derived.items():
        _set(target, name, multiple * hidden)
    _consistent_state_space(target)
    if same_heads and isinstance(_get(target, "num_attention_heads"), int):
        _set(target, "num_key_value_heads", target.num_attention_heads)
    _consistent_heads(target)
    _layer_patterns(target)
    _vocabularies(target, fields)
    if isinstance(_get(target, "axial_pos_embds_dim"), (list, tuple)):  # reformer: factors of the tiny sizes
        hidden, positions = TINY_SIZES["hidden_size"], TINY_SIZES["max_position_embeddings"]
        _set(target, "axial_pos_embds_dim", (hidden // 2, hidden - hidden // 2))
        _set(target, "axial_pos_shape", (16, positions // 16))
    if _get(target, "rope_parameters") == {} and isinstance(_get(target, "layer_types"), list):
        # a default with no rotary parameters where the model reads one set per layer type
        rotary = {"rope_type": "default", "rope_theta": 10000.0}
        _set(target, "rope_parameters", {kind: dict(rotary) for kind in target.layer_types})
    if isinstance(_get(target, "num_kv_shared_layers"), int):
        _set(target, "num_kv_shared_layers", 0)  # layers reading another's cache: none in one of each
    if isinstance(_get(target, "sliding_window"), int):
        target.sliding_window = min(target.sliding_window, 64)
    if _get(target, "use_mamba_kernels") is True and not _mamba_kernels():
        _set(target, "use_mamba_kernels", False)  # zamba's model refuses a config asking for absent kernels


def _mamba_kernels() -> bool:
    """Whether the state-space kernels a config may ask for (the mamba_ssm package) are installed."""
    import importlib.util

    return importlib.util.find_spec("mamba_ssm") is not None


def _tiny_hidden(target, fields: set[str]) -> int:
    """The tiny hidden size, doubled until each fraction of it the config takes (xlstm's query-key
    width at half the hidden size) is still a whole multiple of it: xlstm's cache rounds that width
    up to a multiple of 64 where its layers do not, which real sizes never show."""
    tiny = TINY_SIZES["hidden_size"]
    factors = [_get(target, name) for name in fields if name.endswith("_dim_factor")]
    smallest = min([f for f in factors if isinstance(f, float) and 0 < f < 1], default=1.0)
    for hidden in (tiny, 2 * tiny, 4 * tiny, 8 * tiny):
        if (hidden * smallest) % tiny == 0:
            return hidden
    return tiny  # no small multiple fits (a factor of 0.3): the tiny size, as before


def _consistent_heads(target) -> None:
    """MLA's rotary part as the head size and its query-key size the sum of its parts; one expert
    group for the tiny expert count; a rotary dimension within the head."""
    if isinstance(_get(target, "qk_rope_head_dim"), int):
        _set(target, "head_dim", target.qk_rope_head_dim)  # MLA: the rotary part is the "head_dim"
        if isinstance(_get(target, "qk_head_dim"), int) and isinstance(_get(target, "qk_nope_head_dim"), int):
            _set(target, "qk_head_dim", target.qk_nope_head_dim + target.qk_rope_head_dim)
    for name in ("n_group", "topk_group"):
        if isinstance(_get(target, name), int):
            _set(target, name, 1)
    head = _get(target, "head_dim") or 16
    if isinstance(_get(target, "rotary_dim"), int):
        _set(target, "rotary_dim", min(target.rotary_dim, head))


def _layer_patterns(target) -> None:
    """Each per-layer pattern shrunk to one layer of each kind, and the layer count to match; a
    pattern the default leaves unset where the model reads one (lfm2_moe) is full attention on every
    layer, as its dense sibling's default (lfm2) is."""
    if "layer_types" in _fields(target) and _unset(target, "layer_types"):
        layers = _get(target, "num_hidden_layers")
        if isinstance(layers, int):
            _set(target, "layer_types", ["full_attention"] * layers)
    for name in ("layer_types", "block_types", "attention_layers", "layers_block_type", "mlp_layer_types"):
        value = _get(target, name)
        if isinstance(value, (list, tuple)) and value:
            pattern = _one_of_each(list(value))
            _set(target, name, pattern)
            for layers in ("num_hidden_layers", "n_layer", "num_layers"):
                if isinstance(_get(target, layers), int):
                    _set(target, layers, len(pattern))


def _vocabularies(target, fields: set[str]) -> None:
    """Vocabularies beside the main one not past the tiny one (inkling2's unpadded size, blt's
    hash-embedding groups), another sub-config's hidden size as the tiny one, and the special
    token ids within the tiny vocabulary."""
    vocab = _get(target, "vocab_size")
    for name in fields:
        value = _get(target, name)
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        if name != "vocab_size" and "vocab_size" in name and isinstance(vocab, int):  # gemma3n's per layer
            _set(target, name, min(value, vocab))
        if name.endswith("_vocab"):
            _set(target, name, min(value, TINY_SIZES["vocab_size"]))
        if "hidden" in name and name.endswith("_global"):
            _set(target, name, TINY_SIZES["hidden_size"])
    vocab = _get(target, "vocab_size")
    for name, fallback in (("pad_token_id", 0), ("bos_token_id", 1), ("eos_token_id", 2)):
        value = _get(target, name)
        ids = value if isinstance(value, (list, tuple)) else [value]
        if isinstance(vocab, int) and any(isinstance(i, int) and i >= vocab for i in ids):
            _set(target, name, fallback)  # a default id past the tiny vocabulary
