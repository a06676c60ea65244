"""What a probe run is given: its config (the one definition of every compile and workload option),
the spec file that carries it with the case, the default model, and the lifeline's variable.

Standard library only, and no torch: the orchestrator builds these values, and bounds
``--prompt-length`` and ``--new-tokens`` by the default model, without importing torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

# The variable that names the pipe whose other end the orchestrator holds: when it closes, the
# orchestrator died, and the probe kills its process group (supervise.watch_lifeline).
LIFELINE_VARIABLE = "DIAG_LIFELINE_FD"

# The default model: a small random Llama that runs on a 2-core CPU in seconds. Standard-library data,
# so that the orchestrator can bound --prompt-length and --new-tokens by it without importing torch.
TINY_LLAMA = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=172,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
)

# The count pass's time limit in multiples of a pass's (--timeout): under callgrind a compile runs
# tens of times slower than natively (probe/instructions.py).
COUNT_PASS_LIMIT = 10

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "float16": "float16",
    "fp16": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}


@dataclass(frozen=True)
class Config:
    backend: str = "inductor"
    fullgraph: bool = True
    dynamic: Optional[bool] = None
    mode: Optional[str] = None
    device: str = "cpu"
    dtype: str = "float32"
    batch_size: int = 1
    prompt_length: int = 16
    new_tokens: int = 16
    model: Optional[str] = None
    seed: int = 0
    repeats: int = 5
    warmup: int = 1
    timing_seconds: float = 1.0  # timed generations per mode go on at least this long (and >= repeats)
    threads: Optional[int] = None  # torch intra-op threads; None keeps torch's default
    profile: bool = False  # after the timing pass: one eager and one compiled generation under torch.profiler
    reuse_compiled: bool = True  # the diagnosis may take the timing pass's graphs from the caches (diagnose.py)
    depyf: bool = False  # the diagnosis dumps dynamo's transformed bytecode, decompiled, where depyf is installed
    count_instructions: bool = False  # a count pass: the cold compile's instructions (probe/instructions.py)

    def compile_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"backend": self.backend, "fullgraph": self.fullgraph, "dynamic": self.dynamic}
        if self.mode:
            options["mode"] = self.mode
        return options


@dataclass(frozen=True)
class Spec:
    case: str
    case_path: str
    config: Config
    # whether the row's newest stored run reached the backend's compiler (None: no such run); a hint
    # for what the probe imports before forking (supervise.preload), nothing else
    lowered_before: Optional[bool] = None

    @classmethod
    def load(cls, path: str) -> "Spec":
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(
            case=raw["case"],
            case_path=raw["case_path"],
            config=Config(**raw["config"]),
            lowered_before=raw.get("lowered_before"),
        )
