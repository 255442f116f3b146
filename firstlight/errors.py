"""Exit codes and the could-not-start error, shared by every CLI module (one class, whatever
way the CLI was started: the console script or ``python -m firstlight.cli``)."""

from __future__ import annotations

EXIT_OK, EXIT_FAIL, EXIT_CANNOT_START = 0, 1, 2


class CannotStart(Exception):
    """Bad arguments or a missing tool: exit with EXIT_CANNOT_START."""
