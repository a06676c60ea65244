"""Which cases exist and where their files are, read without importing torch."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from diag.config import cases_dir
from diag.contract import CaseError, read_case_header
from diag.errors import DiagError
from diag.row import BUILTIN


class CatalogError(DiagError):
    pass


@dataclass(frozen=True)
class CaseRef:
    name: str
    path: str
    description: str
    builtin: bool

    @property
    def source(self) -> str:
        """Part of the row: a user case file named like a built-in case is another row, not the built-in's."""
        return BUILTIN if self.builtin else self.path


def builtin_cases() -> list[CaseRef]:
    refs = []
    for file in sorted(cases_dir().glob("*.py")):
        if file.name.startswith("_"):
            continue
        name, description = read_case_header(str(file))
        refs.append(CaseRef(name, str(file.resolve()), description, True))
    return refs


HF_PREFIX = "hf:"
HF_ALL = "hf:all"
_MODEL_TYPE = re.compile(r"^[A-Za-z0-9_.-]+$")


def hf_case(model_type: str) -> CaseRef:
    """The case ``hf:<model_type>``: a tiny random model of that transformers architecture (the
    one case file diag/cases/_hf_arch.py serves every architecture)."""
    if not _MODEL_TYPE.match(model_type):
        raise CatalogError(f"hf:{model_type}: not a transformers model_type (e.g. hf:llama, hf:gpt2, or hf:all)")
    path = cases_dir() / "_hf_arch.py"
    return CaseRef(
        f"{HF_PREFIX}{model_type}",
        str(path.resolve()),
        f"transformers {model_type}, tiny random config: generate, static cache, compiled forward",
        True,
    )


def _looks_like_path(value: str) -> bool:
    return value.endswith(".py") or "/" in value or "\\" in value


def resolve(values: list[str]) -> list[CaseRef]:
    """``--case`` values (names, ``all``, or paths to case files) to case references, in order."""
    known = {ref.name: ref for ref in builtin_cases()}
    resolved: dict[tuple[str, str], CaseRef] = {}  # by (name, source): a user file may reuse a built-in's name
    for value in values:
        if value.startswith(HF_PREFIX):
            if value == HF_ALL:
                raise CatalogError("hf:all is expanded per torch environment (diag run does it)")
            ref = hf_case(value[len(HF_PREFIX) :])
            resolved.setdefault((ref.name, ref.source), ref)
        elif value == "all":
            for ref in known.values():
                resolved.setdefault((ref.name, ref.source), ref)
        elif _looks_like_path(value):
            file = Path(value)
            if not file.is_file():
                raise CatalogError(f"case file not found: {value}")
            try:
                name, description = read_case_header(str(file))
            except (CaseError, SyntaxError, UnicodeDecodeError) as exc:
                raise CatalogError(f"case file {value} cannot be read: {exc}") from exc
            ref = CaseRef(name, str(file.resolve()), description, False)
            resolved.setdefault((ref.name, ref.source), ref)
        elif value in known:
            resolved.setdefault((value, known[value].source), known[value])
        else:
            raise CatalogError(
                f"unknown case {value!r}; known cases: {', '.join(sorted(known))} "
                "(or all, hf:<model_type>, hf:all, or a path to a case file)"
            )
    return list(resolved.values())
