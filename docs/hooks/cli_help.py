"""MkDocs hook: the command line page shows ``sqlcal --help`` and each command's ``--help`` as
the installed parser prints them, generated at build time (never a pasted copy).

A line ``<!-- sqlcal-help -->`` in a page is replaced by the top-level help, and
``<!-- sqlcal-help COMMAND -->`` by that command's help, each in a text block.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- sqlcal-help(?: (?P<command>[a-z]+))? -->$", re.M)
WIDTH = "100"  # argparse wraps help at $COLUMNS - 2: fixed, so the page is the same everywhere


def on_page_markdown(markdown: str, page, config, files) -> str:
    if not MARKER.search(markdown):
        return markdown
    helps = _helps()

    def block(match: re.Match) -> str:
        command = match.group("command")
        if command not in helps:
            raise ValueError(f"{page.file.src_path}: no sqlcal command {command!r}; "
                             f"the commands are {sorted(k for k in helps if k)}")
        shown = "sqlcal --help" if command is None else f"sqlcal {command} --help"
        return f"```text\n$ {shown}\n{helps[command].rstrip()}\n```"

    return MARKER.sub(block, markdown)


def _helps() -> dict[str | None, str]:
    """The help text of the top-level parser (key None) and of each command."""
    # this checkout's sqlcal, whatever is installed
    if sys.path[:1] != [str(ROOT)]:
        sys.path.insert(0, str(ROOT))
    from sqlcal.cli.commands import _parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH  # argparse reads the width when it formats
    try:
        parser, _ = _parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return {None: parser.format_help(),
                **{name: p.format_help() for name, p in sub.choices.items()}}
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous
