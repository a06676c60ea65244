"""In eager mode every case must produce exactly transformers' greedy generate tokens."""

from __future__ import annotations

import pytest
import torch

from diag.probe import llama
from diag.probe.cases import Generation, load_case_file
from diag.run.catalog import builtin_cases

pytestmark = pytest.mark.slow  # builds the model and runs generate for every case

CASES = [ref.name for ref in builtin_cases()]


@pytest.fixture(scope="module")
def model():
    return llama.build_model(None, torch.float32, "cpu", seed=0)


@pytest.mark.parametrize("batch_size", [1, 3])
@pytest.mark.parametrize("name", CASES)
def test_eager_tokens_equal_generate(model, name, batch_size):
    ref = next(r for r in builtin_cases() if r.name == name)
    case = load_case_file(ref.path)
    input_ids, attention_mask = llama.make_prompt(batch_size, 12, model.config.vocab_size, 0, "cpu")
    if batch_size > 1:
        assert (attention_mask[1:] == 0).any(), "rows after the first must be left-padded"
    gen = Generation(model, input_ids, attention_mask, 10, lambda fn: fn)
    with torch.no_grad():
        case.generate(gen)
    expected = llama.reference_tokens(model, input_ids, attention_mask, 10)
    assert torch.equal(torch.cat(gen.tokens, dim=1), expected)


def test_seeded_logits_are_well_separated(model):
    """A near-tie would let a harmless reduction-order change flip the greedy token."""
    input_ids, attention_mask = llama.make_prompt(2, 12, model.config.vocab_size, 0, "cpu")
    with torch.no_grad():
        logits = model(input_ids, attention_mask=attention_mask).logits
    top2 = logits[:, -1].topk(2, dim=-1).values
    assert float((top2[:, 0] - top2[:, 1]).min()) > 1e-2
