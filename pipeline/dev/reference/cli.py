"""The command-line reference, from the ``highwater`` command's own parsers.

Walks the argparse tree :func:`pipeline.cli.build_parser` builds (the ``highwater dev``
commands included, through their entry point): every command with its help and usage,
every flag and argument with its help, default and choices. argparse keeps its sub-commands
and actions in attributes it does not document (``_actions``, ``choices``), the same ones
its own help formatter reads.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from pipeline.cli import build_parser


def commands(
    parser: argparse.ArgumentParser, name: str = "highwater", summary: str = ""
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """``(command line, its one-line help, its parser)`` of every command, depth first."""
    yield name, summary, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for sub, subparser in action.choices.items():
                yield from commands(subparser, f"{name} {sub}", helps.get(sub, ""))


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """Every command and flag of ``parser`` (default: ``highwater``'s), in Markdown."""
    out: list[str] = []
    for line, summary, sub in commands(parser or build_parser()):
        out += [f"### `{line}` {{#{anchor(line)}}}", ""]
        if summary:
            out += [_text(summary), ""]
        elif sub.description and sub.formatter_class is argparse.RawDescriptionHelpFormatter:
            out += ["```text", sub.description.strip(), "```", ""]
        elif sub.description:
            out += [_text(sub.description), ""]
        out += ["```text", _usage(sub), "```", ""]
        rows = [_row(a) for a in sub._actions if _shown(a)]
        if rows:
            out += ["| argument | help | default |", "| --- | --- | --- |", *rows, ""]
    return "\n".join(out)


def _usage(parser: argparse.ArgumentParser) -> str:
    """The usage line at a fixed width, whatever the terminal building the docs."""
    formatter = argparse.HelpFormatter(parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip().removeprefix("usage: ")


def anchor(line: str) -> str:
    """A command's heading id (``highwater changefeed pause`` -> ``cli-changefeed-pause``)."""
    return "-".join(["cli", *line.split()[1:]]) if " " in line else "cli-highwater"


def _shown(action: argparse.Action) -> bool:
    return not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)


def _row(action: argparse.Action) -> str:
    if action.option_strings:
        names = ", ".join(action.option_strings)
        if action.nargs != 0:
            names += f" {action.metavar or action.dest.upper()}"
    else:
        names = str(action.metavar or action.dest)
    help_text = _text(action.help or "")
    if action.choices:
        help_text += (
            (" " if help_text else "") + "One of: " + ", ".join(f"`{c}`" for c in action.choices)
        )
    if action.required and action.option_strings:
        help_text = "**required**. " + help_text
    return f"| `{names}` | {help_text} | {_default(action)} |"


def _default(action: argparse.Action) -> str:
    default = action.default
    if action.nargs == 0 or default in (None, argparse.SUPPRESS, []):
        return ""
    return f"`{default}`"


def _text(text: str) -> str:
    return " ".join(text.replace("%(default)s", "the default").split()).replace("|", "\\|")
