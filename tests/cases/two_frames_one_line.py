"""Two frames torch gives up on at one line in one decode step: a data-dependent branch in a helper
that two functions call from inside a ``try`` block, where dynamo cannot resume after a break, so it
skips each caller's frame whole ("Failed to handle graph break gracefully. Skipping the function"),
both at the helper's line. torch counts two frames given up; so must diag's hidden errors."""

from diag.probe.cases import case

from _greedy import full_forward, greedy


def branchy(logits):
    if logits.sum() > 0:  # data-dependent branching: a graph break
        return logits * 1.0
    return logits * 1.0


def scaled_a(logits):
    try:
        return branchy(logits) * 0.5
    finally:
        pass


def scaled_b(logits):
    try:
        return branchy(logits) * 0.5
    finally:
        pass


def step(model, input_ids, attention_mask):
    logits = full_forward(model, input_ids, attention_mask)
    return scaled_a(logits) + scaled_b(logits)


@case("two_frames_one_line", "two frames given up at one line in one decode step")
def generate(gen):
    greedy(gen, gen.compile(step))
