"""The renderer's own errors: each message says which file and what is wrong, in one line. The
command line prints it and exits nonzero; nothing else leaves the renderer as a traceback."""
from __future__ import annotations


class ReportError(Exception):
    """A problem the renderer explains in one line (what, which file, what to change)."""


class InputError(ReportError):
    """A result file or folder that cannot be read as one: missing, not a regular file, too large,
    not JSON, or not the structure it should have."""


class OutputError(ReportError):
    """A report file that cannot be written: an unwritable folder, a full disk."""
