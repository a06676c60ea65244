"""A decode step that dynamo gives up on (a data-dependent branch inside a loop), then wraps its
logits in a transformers ModelOutput. The output's dataclass ``__init__`` (source ``<string>``) is a
frame dynamo traces on its own: on torch 2.0 each field's assignment there breaks the graph
(``call_method DataClassVariable() __setitem__``), and torch's log places each break in that
``__init__``, not in the case."""

from transformers.modeling_outputs import BaseModelOutputWithPast

from diag.probe.cases import case

from _greedy import full_forward, greedy


def step(model, input_ids, attention_mask):
    logits = full_forward(model, input_ids, attention_mask)
    kept = ()
    for _ in range(2):
        kept += (logits,)  # torch 2.0 cannot add to an empty tuple: a break, placed at the loop's head
    return BaseModelOutputWithPast(last_hidden_state=logits, past_key_values=kept).last_hidden_state


@case("dataclass_init_break", "a ModelOutput built after a frame dynamo skipped")
def generate(gen):
    greedy(gen, gen.compile(step))
