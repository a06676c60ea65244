"""One way to name a case x config, for the terminal, the report and comparisons."""

from __future__ import annotations

from typing import Any, Mapping

WORKLOAD = {"batch_size": "b", "prompt_length": "p", "new_tokens": "n"}


def config_label(fields: Mapping[str, Any], workload: tuple[str, ...] = ("batch_size",)) -> str:
    """``inductor fullgraph mode=reduce-overhead cpu float32 b1``: defaults (dynamic auto, mode default) left out."""
    parts = [fields["backend"], "fullgraph" if fields["fullgraph"] else "no-fullgraph"]
    if fields.get("dynamic") not in (None, "auto"):
        parts.append(f"dynamic={fields['dynamic']}")
    if fields.get("mode") not in (None, "default"):
        parts.append(f"mode={fields['mode']}")
    parts += [fields["device"], fields["dtype"]]
    parts += [f"{WORKLOAD[name]}{fields[name]}" for name in workload]
    return " ".join(str(part) for part in parts)
