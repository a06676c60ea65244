"""The command-line reference (docs/cli.md), generated from the commands' own help.

``cog -r docs/cli.md`` rewrites it; ``tests/test_docs.py`` fails when it is stale.
"""

from __future__ import annotations

import click

WIDTH = 100


def _commands(group: click.Group, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], click.Command]]:
    found = []
    for name in sorted(group.commands):
        command = group.commands[name]
        found.append(((*path, name), command))
        if isinstance(command, click.Group):
            found += _commands(command, (*path, name))
    return found


def help_text(root: click.Group, path: tuple[str, ...]) -> str:
    """``diag PATH --help`` as it prints at a fixed width."""
    settings = {"terminal_width": WIDTH, "max_content_width": WIDTH, **root.context_settings}
    context = click.Context(root, info_name="diag", **settings)
    command: click.Command = root
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
        context = click.Context(command, info_name=name, parent=context, **settings)
    return command.get_help(context)


def markdown(root: click.Group) -> str:
    """Every command's help, in the order ``diag --help`` lists them, as Markdown."""
    parts = ["## diag\n", "```", help_text(root, ()), "```\n"]
    for path, _ in _commands(root, ()):
        parts += [f"## diag {' '.join(path)}\n", "```", help_text(root, path), "```\n"]
    return "\n".join(parts)
