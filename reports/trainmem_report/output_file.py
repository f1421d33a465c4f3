"""Report files written whole or not at all, as trainmem writes its results
(common/util/output_file.h): each file is written to a temporary file in its folder, flushed to
disk and renamed over the target (os.replace). A reader, a full disk or an interrupted render
sees the earlier file or the new one, never half of one; on an error the temporary file is
removed. A replaced file keeps its mode; a new one gets 0666 & ~umask, as open() would give it.
A target that exists and is not a regular file (/dev/null, a FIFO) cannot be replaced: it is
written in place. The file system's errors (an unwritable folder, a full disk) become an
OutputError that names the file.
"""
from __future__ import annotations

import os
import pathlib
import stat
import tempfile
from typing import Callable

from .errors import OutputError


def _new_file_mode() -> int:
    umask = os.umask(0)  # the only way to read it is to set it: set it back at once
    os.umask(umask)
    return 0o666 & ~umask


def make_folder(path: pathlib.Path) -> pathlib.Path:
    """Creates the folder `path` (and its parents) if it is not there; OutputError if it cannot."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create the folder {path}: {e.strerror or e}") from e
    return path


def write_file(path: pathlib.Path | str, write: Callable[[pathlib.Path], object]) -> pathlib.Path:
    """Calls `write(p)` to write the file at `p` (a temporary path with the target's suffix, so that
    e.g. matplotlib picks the format from it), then puts it in `path`'s place. Returns `path`.
    An OSError (from `write` or the file system) becomes an OutputError; any other exception from
    `write` passes on. Either way `path` is untouched."""
    path = pathlib.Path(path)
    try:
        _replace(path, write)
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from e
    return path


def _replace(path: pathlib.Path, write: Callable[[pathlib.Path], object]) -> None:
    target = path.resolve() if path.is_symlink() else path  # the link stays a link
    if target.exists() and not target.is_file():
        write(target)
        return
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else _new_file_mode()
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.tmp-", suffix=target.suffix)
    os.close(fd)
    temporary = pathlib.Path(name)
    try:
        write(temporary)
        os.chmod(temporary, mode)
        with open(temporary, "rb") as f:
            os.fsync(f.fileno())  # on disk before the rename: after a crash, the old file or the new one
        os.replace(temporary, target)
    except BaseException:  # KeyboardInterrupt too
        temporary.unlink(missing_ok=True)
        raise
    folder = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # the rename itself reaches the disk with the folder
    finally:
        os.close(folder)
