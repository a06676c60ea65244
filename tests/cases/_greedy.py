"""Helpers for the test cases: a cache-free greedy loop (recomputes the whole prefix each step)."""

import torch

from diag.probe import llama


def full_forward(model, input_ids, attention_mask):
    return llama.prefill(model, input_ids, attention_mask)[0]


def greedy(gen, step):
    """Drive ``gen`` with ``step(model, ids, mask) -> logits`` over the growing sequence."""
    ids, mask = gen.input_ids, gen.attention_mask
    token = gen.emit(full_forward(gen.model, ids, mask)[:, -1])
    for _ in gen.steps():
        ids = torch.cat([ids, token], dim=1)
        mask = torch.cat([mask, mask.new_ones(gen.batch_size, 1)], dim=1)
        token = gen.emit(step(gen.model, ids, mask)[:, -1])
