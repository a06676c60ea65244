"""A case whose eager tokens are not transformers' generate: it emits the runner-up token."""

from diag.probe.cases import case

from _greedy import full_forward, greedy


@case("wrong_eager", "emits the second-best token, so its eager run disagrees with transformers' generate")
def generate(gen):
    step = gen.compile(full_forward)

    def runner_up(*args):
        logits = step(*args)
        return logits.scatter(-1, logits.argmax(-1, keepdim=True), float("-inf"))

    greedy(gen, runner_up)
