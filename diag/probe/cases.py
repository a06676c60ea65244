"""The case API: what a generation-step variant sees, and how it registers itself.

A case is a Python file with one function decorated by ``@case``. The function
receives a :class:`Generation` and drives greedy decoding with it:

    from diag.probe.cases import case
    from diag.probe import llama

    @case("my_variant", "One line that says what this variant does")
    def generate(gen):
        logits, keys, values = llama.prefill(gen.model, gen.input_ids, gen.attention_mask)
        token = gen.emit(logits[:, -1])
        step = gen.compile(my_decode_step)
        for i in gen.steps():
            token = gen.emit(step(gen.model, token, ...)[:, -1])

This module imports only the standard library: it is loaded inside target
torch environments and by the orchestrator when it lists cases.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.util
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

GenerateFn = Callable[["Generation"], None]
# The decode_step of what happened in the prefill: the compiled call (or anything compiled) before the
# first decode step. None is a step not known (outside the generation, or stored before the prefill
# was told apart). Here, not in records.py, because a repro carries this module alone (diag/repro.py).
PREFILL = -1
EMIT_RANGE = "diag: emit"  # what a profiler's range around each emit is named (probe/attribution.py)


@dataclass(frozen=True)
class Case:
    name: str
    description: str
    generate: GenerateFn
    path: str


class CaseError(Exception):
    """A case file that cannot be loaded or does not register a case."""


_registry: dict[str, Case] = {}


def case(name: str, description: str) -> Callable[[GenerateFn], GenerateFn]:
    """Register the decorated function as the generation loop of case ``name``."""

    def register(fn: GenerateFn) -> GenerateFn:
        path = str(Path(fn.__code__.co_filename).resolve())
        known = _registry.get(name)
        if known is not None and known.path != path:
            raise CaseError(f"case {name!r} is registered twice: {known.path} and {path}")
        _registry[name] = Case(name=name, description=description, generate=fn, path=path)
        return fn

    return register


def load_case_file(path: str) -> Case:
    """Import a case file by path and return the case it registered.

    The file's folder goes on sys.path first, so a case can import helper
    modules that sit next to it.
    """
    file = Path(path).resolve()
    if not file.is_file():
        raise CaseError(f"case file not found: {path}")
    if str(file.parent) not in sys.path:
        sys.path.insert(0, str(file.parent))
    before = dict(_registry)
    module_name = f"diag_case_{file.stem}_{abs(hash(str(file)))}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise CaseError(f"cannot import case file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise CaseError(f"case file {path} failed to import: {type(exc).__name__}: {exc}") from exc
    added = [c for n, c in _registry.items() if before.get(n) is not c and c.path == str(file)]
    if len(added) != 1:
        raise CaseError(f"case file {path} must register exactly one case with @case, found {len(added)}")
    return added[0]


def read_case_header(path: str) -> tuple[str, str]:
    """Name and description of a case file, read from its source without importing it.

    The orchestrator lists and validates cases this way, so that listing cases
    needs neither torch nor transformers.
    """
    source = Path(path).read_text(encoding="utf-8")
    tree = ast.parse(source, filename=path)
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for deco in node.decorator_list:
            if isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "case":
                args = [a.value for a in deco.args if isinstance(a, ast.Constant)]
                kwargs = {k.arg: k.value.value for k in deco.keywords if isinstance(k.value, ast.Constant)}
                name = kwargs.get("name", args[0] if args else None)
                description = kwargs.get("description", args[1] if len(args) > 1 else "")
                if isinstance(name, str):
                    return name, str(description)
    raise CaseError(f'{path} has no @case("name", "description") function')


class Generation:
    """One greedy generation, as a case drives it.

    ``compile`` applies the run's torch.compile options (or nothing, in the eager
    pass); ``steps`` yields decode-step indices and tells the collectors which
    step is running; ``emit`` records one step's logits and returns the greedy
    next token.
    """

    def __init__(
        self,
        model: Any,
        input_ids: Any,
        attention_mask: Any,
        new_tokens: int,
        compile_fn: Callable[[Callable], Callable],
        on_step: Optional[Callable[[Optional[int]], None]] = None,
        clock: Optional[Callable[[], Callable[[], float]]] = None,
        case_name: str = "",
        seed: int = 0,
        regions: bool = False,
        region_end: Optional[Callable[[], None]] = None,
        mark: Optional[Callable[[str], Any]] = None,
    ) -> None:
        """``regions``: time the calls of what ``compile`` returns, for ``between_seconds`` (the
        compiled pass; the eager one gets its functions back as they are). ``region_end``: called as
        each such call returns (a device synchronize, so that the call's device work is its own).
        ``mark``: a context manager factory named after what runs inside (a profiler's
        record_function), around each ``emit``."""
        self.case_name = case_name
        self.seed = seed  # the run's --seed: a case that builds its own model or prompt seeds them with it
        self.own = False  # the case runs a model or prompt of its own (use, watch): no generate oracle required
        self.model = model
        self.input_ids = input_ids
        self.attention_mask = attention_mask
        self.new_tokens = new_tokens
        self._compile_fn = compile_fn
        self._on_step = on_step or (lambda step: None)
        self._clock = clock or wall_clock
        self.logits: list[Any] = []
        self.tokens: list[Any] = []
        self.step_seconds: list[float] = []
        # per decode step, the host's wall time outside the compiled calls and outside emit (the
        # loop's own work between the compiled regions); kept only where ``regions`` timed them
        self.between_seconds: list[float] = []
        self.notes: list[str] = []
        self._regions, self._region_end, self._mark = regions, region_end, mark
        self._in_region = 0.0  # seconds of the step in flight spent in compiled calls
        self._in_emit = 0.0  # and in emit
        self._region_depth = 0
        self._timed_regions = 0  # compiled callables that time their calls (what between_seconds needs)

    @property
    def batch_size(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def prompt_length(self) -> int:
        return int(self.input_ids.shape[1])

    @property
    def max_length(self) -> int:
        return self.prompt_length + self.new_tokens

    def compile(self, fn: Callable) -> Callable:
        """``fn`` compiled with the run's options; ``fn`` itself in the eager pass. Where calls are
        timed (``regions``), a wrapper around the compiled function that adds each call's time to the
        step in flight's; a compiled module is returned as it is."""
        compiled = self._compile_fn(fn)
        if not self._regions or compiled is fn or hasattr(compiled, "parameters"):
            return compiled  # a module stays a module: its calls are not timed
        self._timed_regions += 1
        return functools.wraps(fn)(functools.partial(self._region, compiled))

    def _region(self, compiled: Callable, *args: Any, **kwargs: Any) -> Any:
        """A call of a compiled callable, its wall time added to the step in flight's (a call made
        inside another is the outer one's)."""
        if self._region_depth:
            return compiled(*args, **kwargs)
        self._region_depth += 1
        start = time.perf_counter()
        try:
            return compiled(*args, **kwargs)
        finally:
            if self._region_end is not None:
                self._region_end()
            self._in_region += time.perf_counter() - start
            self._region_depth -= 1

    def emit(self, logits: Any, token: Any = None) -> Any:
        """Record next-token logits of shape (batch, vocab) and the token the loop chose, shape
        (batch, 1); without ``token``, the greedy one. Returns the recorded token."""
        start = time.perf_counter()
        with self._mark(EMIT_RANGE) if self._mark is not None else contextlib.nullcontext():
            logits = logits.detach()
            if token is None:
                token = logits.argmax(dim=-1, keepdim=True)
            # copies: a loop may write into its logits after this (masking a token in place)
            self.logits.append(logits.float().cpu().clone())
            self.tokens.append(token.detach().reshape(-1, 1).cpu().clone())
        self._in_emit += time.perf_counter() - start
        return token

    def use(self, model: Any = None, input_ids: Any = None, attention_mask: Any = None) -> None:
        """Run on the case's own model and/or prompt instead of diag's tiny Llama and random prompt.

        The run's reference is then the case's own eager pass (its tokens and logits); agreement
        with transformers' ``generate`` is recorded when the model has one, not required.
        """
        if model is not None and model is not self.model:
            self.model, self.own = model, True
        if input_ids is not None:
            self.input_ids, self.own = input_ids, True
            self.attention_mask = attention_mask if attention_mask is not None else input_ids.new_ones(input_ids.shape)

    def note(self, text: str) -> None:
        """Say how this generation ran where it is not what the case's name promises (a fallback
        taken, and why): stored with the run, shown by ``diag show`` and on the run page."""
        text = str(text)
        if text not in self.notes:
            self.notes.append(text)

    def chosen(self, sequences: Any) -> Any:
        """Record the tokens a loop the case does not own chose, from the sequences it returned
        (batch, prompt + new tokens): the last column of each step is known only from its output.
        Returns ``sequences``."""
        count = len(self.tokens)
        if count and sequences.shape[1] >= count:
            self.tokens = [
                sequences[:, i : i + 1].detach().cpu() for i in range(sequences.shape[1] - count, sequences.shape[1])
            ]
        return sequences

    @contextlib.contextmanager
    def watch(self, model: Any, method: str = "forward") -> Iterator[Any]:
        """Compile ``model.<method>`` with the run's options while the block runs, so that a loop the
        case does not own (``model.generate``, a library's decode loop) runs unchanged on it.

        Each call is attributed: the first to the prefill, the next ones to decode steps 0, 1, ...
        (recompiles and step times go to the step in flight; a step's time is the call's alone, not
        the loop's bookkeeping, and the loop's time from one decode call's return to the next call
        is that step's between-step time). Each call's last-position logits are recorded; the token recorded
        for a call is the one the loop fed into the next call (its ``input_ids``' last column), so
        sampling or EOS masking is seen as the loop decided it; pass the loop's output to
        ``chosen`` for the last one (else it is the greedy token). Yields ``model``.
        """
        if model is not self.model:
            self.use(model=model)
        had_own = method in vars(model)
        original = getattr(model, method)
        compiled = self._compile_fn(original)  # timed here, call by call: no region wrapper
        calls = 0
        ended: Optional[float] = None  # when the previous decode call (and its emit) returned

        def watched(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls, ended
            index, calls = calls, calls + 1
            if ended is not None and self._regions and compiled is not original:
                # the loop's own work since the previous decode call: that step's between-step time
                self.between_seconds.append(time.perf_counter() - ended)
            fed = kwargs.get("input_ids", args[0] if args else None)
            if index > 0 and fed is not None and hasattr(fed, "shape") and len(fed.shape) == 2 and self.tokens:
                self.tokens[-1] = fed[:, -1:].detach().cpu()  # what the loop chose after the previous call
            self._on_step(PREFILL if index == 0 else index - 1)
            stop = self._clock()
            output = compiled(*args, **kwargs)
            if index > 0:
                self.step_seconds.append(stop())
            self.emit(_logits_of(output)[:, -1])
            ended = time.perf_counter() if index > 0 else None
            return output

        # the original's name and signature (inspect follows __wrapped__): libraries that check
        # which arguments the forward takes (transformers' generate does) see the model's own
        functools.update_wrapper(watched, original)
        setattr(model, method, watched)
        try:
            yield model
        finally:
            if had_own:
                setattr(model, method, original)
            else:
                delattr(model, method)
            self._on_step(None)

    def steps(self) -> Iterator[int]:
        """Decode-step indices 0 .. new_tokens - 2 (the prefill emits the first token).

        Each step's wall time is kept for the timing pass, and the collectors
        attribute what torch logs to the step in flight. Where the compiled callables are timed,
        the step's host time outside them and outside ``emit`` is its between-step time.
        """
        for index in range(self.new_tokens - 1):
            self._on_step(index)
            self._in_region = self._in_emit = 0.0
            start = time.perf_counter()
            stop = self._clock()
            yield index
            self.step_seconds.append(stop())
            if self._timed_regions:
                host = time.perf_counter() - start
                self.between_seconds.append(max(0.0, host - self._in_region - self._in_emit))
        self._on_step(None)


def _logits_of(output: Any) -> Any:
    """The logits tensor of a forward's output: ``.logits`` (transformers), the first item of a
    tuple, or the output itself."""
    if hasattr(output, "logits"):
        return output.logits
    if isinstance(output, (tuple, list)):
        return output[0]
    return output


def wall_clock() -> Callable[[], float]:
    """Start a measurement; the returned function gives the seconds since."""
    start = time.perf_counter()
    return lambda: time.perf_counter() - start
