"""The ``sqlcal`` command (entry point ``sqlcal.cli.commands:main``)."""

from sqlcal.cli.commands import main

__all__ = ["main"]
