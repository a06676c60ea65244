"""A decode step handed how many generate calls came before it, as a Python int: dynamo guards on the
int's value, so each generate call compiles the step again. Within one call nothing changes; a
second call recompiles."""

from diag.probe.cases import case

from _greedy import full_forward, greedy

calls = [0]


def scaled_forward(model, input_ids, attention_mask, call):
    return full_forward(model, input_ids, attention_mask) * (1.0 + 0.0 * call)


@case("counts_calls", "a decode step guarded on a per-call Python int: the second generate call recompiles")
def generate(gen):
    calls[0] += 1
    call = calls[0]
    step = gen.compile(scaled_forward)
    greedy(gen, lambda model, ids, mask: step(model, ids, mask, call))
