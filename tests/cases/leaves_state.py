"""A case that notes the process-wide state it finds, then changes it all and leaves it so: dynamo's
config, torch.backends flags, torch's thread count and default dtype, an environment variable, a thread that never
ends and 200 MB held in a module. A run after it in the same matrix must find what the first found."""

import os
import sys
import threading
import time

import torch

from diag.probe.cases import case

from _greedy import full_forward, greedy

HELD = []


def _seen() -> str:
    config = torch._dynamo.config
    return (
        f"threads alive {threading.active_count()}, intra-op threads {torch.get_num_threads()}, "
        f"default dtype {torch.get_default_dtype()}, suppress_errors {config.suppress_errors}, "
        f"verbose {config.verbose}, mkldnn {torch.backends.mkldnn.enabled}, "
        f"cudnn deterministic {torch.backends.cudnn.deterministic}, DIAG_TEST_LEFT {os.environ.get('DIAG_TEST_LEFT')}, "
        f"module left {'diag_test_left' in sys.modules}, memory held {len(HELD)}"
    )


@case("leaves_state", "notes the global state it finds, then changes it and leaves it so")
def generate(gen):
    gen.note(f"found: {_seen()}")
    greedy(gen, gen.compile(full_forward))
    torch._dynamo.config.suppress_errors = True
    torch._dynamo.config.verbose = True
    torch.backends.mkldnn.enabled = False
    torch.backends.cudnn.deterministic = True
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    os.environ["DIAG_TEST_LEFT"] = "1"
    sys.modules["diag_test_left"] = sys
    HELD.append(bytearray(200 << 20))
    threading.Thread(target=time.sleep, args=(3600,), name="never-ends").start()
