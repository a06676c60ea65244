"""What both probe passes share: the spec, the results file, the model and the generation loop.

Imports: standard library, torch, transformers (through ``llama``).
"""

from __future__ import annotations

import os
import platform
import re
import sys
import traceback
from typing import Any, Callable, Optional

from diag.probe import compat, parsers
from diag.probe.cases import PREFILL, Case, Generation, wall_clock
from diag.probe.record_types import BuildRecord, ResultRecord
from diag.probe.spec import DTYPES, Spec
from diag.probe.statuses import ENVIRONMENT_ERRNOS


def build() -> BuildRecord:
    """The fields of a ``build`` record for the running interpreter and torch."""
    import torch

    info: BuildRecord = {
        "torch_version": torch.__version__,
        "git_version": getattr(torch.version, "git_version", None),
        "cuda_version": getattr(torch.version, "cuda", None),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "executable": sys.executable,
        "device_name": torch.cuda.get_device_name(0)
        if torch.cuda.is_available()
        else platform.processor() or platform.machine(),
    }
    info["transformers_version"] = _version_of("transformers")
    info["depyf_version"] = _version_of("depyf")
    info["packages"] = installed()
    info["driver_version"] = driver_version()
    return info


def installed() -> dict[str, str]:
    """Every distribution the interpreter can import from, by its normalised name (PEP 503): its
    version. The first of a name on the path wins, as it does for an import."""
    from importlib import metadata

    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if name:
            found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), dist.version or "?")
    return dict(sorted(found.items()))


def driver_version(path: str = "/proc/driver/nvidia/version") -> Optional[str]:
    """The NVIDIA kernel driver's version, where the machine has one loaded; None otherwise."""
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            found = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", file.readline())
    except OSError:
        return None
    return found.group(1) if found else None


def _version_of(package: str) -> Optional[str]:
    try:
        return getattr(__import__(package), "__version__", "unknown")
    except ImportError:
        return None


def environment_error(exc: BaseException) -> Optional[str]:
    """The machine fault behind ``exc``, searched along its causes and contexts, or None."""
    seen: set[int] = set()
    current: Optional[BaseException] = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in ENVIRONMENT_ERRNOS:
            where = f": {current.filename}" if current.filename else ""
            return f"{os.strerror(current.errno)}{where}"
        # A compiler run in a subprocess (inductor's C++ build) reports the fault only as text.
        for line in str(current).splitlines():
            for code in ENVIRONMENT_ERRNOS:
                if os.strerror(code) in line:
                    return f"{os.strerror(code)} (in {type(current).__name__}: {line.strip()[:200]})"
        inner = compat.unwrap_backend_error(current)
        current = inner if inner is not current else (current.__cause__ or current.__context__)
    return None


def said(exc: BaseException) -> str:
    """An exception's message, led by what it is about where its own text says nothing before
    dynamo's "from user code:" section: torch 2.0's TorchRuntimeError (the error is its cause's,
    ``raise TorchRuntimeError() from e``), or a bare ``assert`` inside dynamo (the line that failed,
    and where)."""
    message = str(exc)
    if message.split(parsers.FROM_USER_CODE, 1)[0].strip():
        return message
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    if cause is not None and str(cause).strip():
        head = f"{type(cause).__name__}: {str(cause).strip()}"
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        if not frames:
            return message
        last = frames[-1]
        where = f"{last.filename.replace(chr(92), '/').split('-packages/')[-1]}:{last.lineno}"
        line = (last.line or "").strip()
        head = f"`{line}` failed at {where}" if line.startswith("assert") else f"raised at {where}: `{line}`"
    return head + ("\n\n" + message.strip() if message.strip() else "")


def exception_info(exc: BaseException) -> ResultRecord:
    return {
        "error_type": type(exc).__name__,
        "error_message": said(exc),
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        "environment_error": environment_error(exc),
    }


def error_location(exc: BaseException, case_path: str) -> Optional[str]:
    """The user-code line an exception points at, preferring a line of the case file."""
    message = str(exc)
    location = parsers.innermost_user_frame(parsers.user_code_section(message), prefer=case_path)
    if location is None or "from user code:" not in message:
        frames = "".join(traceback.format_tb(exc.__traceback__))
        location = parsers.innermost_user_frame(frames, prefer=case_path) or location
    return location


class Workload:
    """The model and prompt of one spec, and the means to run its case eagerly or compiled."""

    def __init__(self, spec: Spec, case: Case, like: Optional["Workload"] = None) -> None:
        """``like``: a workload of the same config whose model and prompt this one shares (a race)."""
        import torch

        from diag.probe import llama

        cfg = spec.config
        self.spec, self.case = spec, case
        self.torch = torch
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.dtype = getattr(torch, DTYPES[cfg.dtype])
        self.model: Any
        self.input_ids: Any
        self.attention_mask: Any
        if like is not None and like.spec.config == cfg:
            self.model, self.input_ids, self.attention_mask = like.model, like.input_ids, like.attention_mask
        else:
            self.model = llama.build_model(cfg.model, self.dtype, cfg.device, cfg.seed)
            self.input_ids, self.attention_mask = llama.make_prompt(
                cfg.batch_size, cfg.prompt_length, self.model.config.vocab_size, cfg.seed, cfg.device
            )
        self.current_step: Optional[int] = None
        self.step_listeners: list[Callable[[], None]] = []  # called at each decode step's boundary
        self.notes: list[str] = []  # what the last generation's case said about how it ran
        self.mark: Optional[Callable[[str], Any]] = None  # a profiler's record_function, while one runs

    @property
    def on_cuda(self) -> bool:
        return self.spec.config.device.startswith("cuda")

    def synchronize(self) -> None:
        if self.on_cuda:
            self.torch.cuda.synchronize()

    def clock(self) -> Callable[[], float]:
        """Start timing one decode step: CUDA events on a GPU (device time, synchronised), else wall time."""
        if not self.on_cuda:
            return wall_clock()
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()

        def stop() -> float:
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3

        return stop

    def _set_step(self, step: Optional[int]) -> None:
        self.current_step = step
        for listener in self.step_listeners:
            listener()

    def generate(self, compile_fn: Callable[[Callable], Callable], compiling: bool = False) -> Generation:
        gen = Generation(
            self.model,
            self.input_ids,
            self.attention_mask,
            self.spec.config.new_tokens,
            compile_fn,
            on_step=self._set_step,
            clock=self.clock,
            case_name=self.spec.case,
            seed=self.spec.config.seed,
            regions=compiling,
            region_end=self.synchronize if self.on_cuda else None,
            mark=self.mark,
        )
        # every pass starts from one seed: a case that builds its own model or prompt builds the same one
        self.torch.manual_seed(self.spec.config.seed)
        self._set_step(PREFILL)  # what compiles before the first decode step is the prefill's
        try:
            with self.torch.no_grad():
                self.case.generate(gen)
        finally:
            self._set_step(None)
            self.notes = list(gen.notes)  # kept where the case raised: the note may say why
        if len(gen.tokens) != self.spec.config.new_tokens:
            raise RuntimeError(
                f"case {self.case.name} emitted {len(gen.tokens)} tokens, "
                f"expected new_tokens={self.spec.config.new_tokens}"
            )
        return gen

    def eager(self) -> Generation:
        return self.generate(lambda fn: fn)

    def compiled(self) -> Generation:
        options = self.spec.config.compile_options()
        return self.generate(lambda fn: self.torch.compile(fn, **options), compiling=True)
