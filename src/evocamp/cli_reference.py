"""The command-line reference, ``docs/cli.md``, generated from the ``evocamp`` parser.

``python -m evocamp.cli_reference docs/cli.md`` rewrites the file's block between
``<!-- BEGIN generated: commands -->`` and ``<!-- END generated: commands -->`` (as
:mod:`evocamp.reporting.reference` does for ``docs/configuration.md``); a test fails
when the file is not what this module generates, so the page cannot drift from
``evocamp --help``.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

from evocamp.cli import build_parser
from evocamp.reporting.reference import render

#: Columns of the help texts on the page (``--help`` fits the terminal instead).
WIDTH = 88


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The sub-commands' parsers by name (argparse keeps them on its sub-parsers
    action, which it does not expose otherwise)."""
    (action,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _help(parser: argparse.ArgumentParser) -> str:
    """What ``--help`` prints for ``parser``, ``WIDTH`` columns wide."""
    parser.formatter_class = functools.partial(argparse.HelpFormatter, width=WIDTH)
    return "```text\n" + parser.format_help() + "```\n"


def commands_reference() -> str:
    """The generated block of ``docs/cli.md``: a table of the sub-commands, then what
    ``evocamp --help`` and each ``evocamp <command> --help`` print."""
    parser = build_parser()
    commands = _commands(parser)
    lines = ["| command | what it does |", "| --- | --- |"]
    for name, sub in commands.items():
        summary = " ".join(sub.description.split())
        lines.append(f"| [`{name}`](#evocamp-{name}) | {summary} |")
    sections = ["\n".join(lines) + "\n", "## evocamp\n\n" + _help(parser)]
    sections += [f"## evocamp {name}\n\n" + _help(sub) for name, sub in commands.items()]
    return "\n".join(sections)


def main(argv: list[str] | None = None) -> None:
    """Rewrite the generated block of the given Markdown files in place."""
    for name in argv if argv is not None else sys.argv[1:]:
        path = Path(name)
        path.write_text(render(path.read_text(), blocks={"commands": commands_reference}))


if __name__ == "__main__":
    main()
