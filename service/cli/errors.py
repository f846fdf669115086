"""The error every command raises for a problem the user can fix."""

from __future__ import annotations


class CliError(Exception):
    """A problem the user can fix, reported as one line on stderr (exit status 1)."""
