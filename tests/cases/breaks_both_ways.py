"""A decode step that reaches one `.item()` break twice: once where dynamo resumes after it, once
inside a loop, where it cannot and the rest of the frame runs eagerly. torch logs the same break
(one graph-break id, one line) as resumable and as not; they are two rows, not one."""

from diag.probe.cases import case

from _greedy import full_forward, greedy


def scale_of(logits):
    return logits.abs().max().item()  # the break, reached from both places below


def scaled_forward(model, input_ids, attention_mask):
    logits = full_forward(model, input_ids, attention_mask)
    top = scale_of(logits)  # resumable: the frame goes on after it
    for _ in range(2):
        top = top + 0.0 * scale_of(logits)  # in a loop: not resumable
    return logits * (1.0 + 0.0 * top)


@case("breaks_both_ways", "one .item() break reached once resumably and once in a loop, where it is not")
def generate(gen):
    step = gen.compile(scaled_forward)
    greedy(gen, lambda model, ids, mask: step(model, ids, mask))
