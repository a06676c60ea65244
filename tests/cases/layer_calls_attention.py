"""A Llama-shaped stack whose decoder layer calls its attention module, and the attention a rotary
helper, each call binding a default tensor argument; the model's own forward is watched, so the
prefill compiles as each decode step does.

On torch 2.0.1 dynamo cannot bind such a call while inlining it (``VariableBuilder.__init__() got an
unexpected keyword argument 'guards'``, swallowed) and ends the graph "due to arg mismatch inlining"
at the call: at the model's call of each layer, at each layer's call of its attention and at the
attention's call of the helper, in the prefill and again in every decode step (the prefix grows, so
each step recompiles). One counted break, several places and steps: each stored where torch's log
says it happened.
"""

import torch

from diag.probe.cases import case

ONE = torch.ones(())
WIDTH, VOCAB, LAYERS = 16, 64, 2


def rotated(x, scale=ONE):
    """A stand-in for rotary embedding: half the features swapped and signed, scaled."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1) * scale


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH, bias=False)
        self.out = torch.nn.Linear(WIDTH, WIDTH, bias=False)

    def forward(self, hidden, temperature=ONE):
        query, key, value = self.qkv(hidden).chunk(3, dim=-1)
        query = rotated(query)  # the helper's call: a break of its own
        length = hidden.shape[1]
        causal = torch.full((length, length), float("-inf")).triu(1)
        weights = torch.softmax(query @ key.transpose(-1, -2) / temperature + causal, dim=-1)
        return self.out(weights @ value)


class DecoderLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.self_attn = Attention()
        self.mlp = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, hidden):
        hidden = hidden + self.self_attn(self.norm(hidden))  # the attention's call
        return hidden + torch.tanh(self.mlp(hidden))


class TinyStack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.layers = torch.nn.ModuleList(DecoderLayer() for _ in range(LAYERS))
        self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, input_ids):
        hidden = self.embed(input_ids)
        for layer in self.layers:
            hidden = layer(hidden)
        return self.head(hidden)


@case("layer_calls_attention", "a decoder layer calling its attention through a default tensor argument, watched")
def generate(gen):
    torch.manual_seed(gen.seed)
    model = TinyStack().eval()
    ids = torch.randint(0, VOCAB, (gen.batch_size, gen.prompt_length))
    with torch.no_grad(), gen.watch(model):
        for _ in range(gen.new_tokens):
            token = model(ids)[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, token], dim=1)
