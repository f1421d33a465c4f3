"""Reading one result file: only a regular file (a FIFO or a device would block or never end),
at most MAX_INPUT_BYTES of it (memory and time stay bounded whatever the folder holds), parsed as
JSON. Anything else is an InputError that names the file and says what is wrong.

The type and the size are checked on the open file (fstat), not on the name: the file may change
between a check of the name and the read. And no more than the limit is read, even from a file
that grows while it is read.
"""
from __future__ import annotations

import json
import os
import pathlib
import stat

from .errors import InputError

# The largest result file the renderer reads: 200x the largest of a CPU run (a 114 KB snapshot),
# and above what `trainmem train --record-memory` writes for GPT-2 124M (a few MB for 3 steps).
# Parsed JSON takes about 10x its size in memory.
MAX_INPUT_BYTES = 32 * 2**20

_KINDS = [(stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")]


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def _too_large(path: pathlib.Path, size: int, limit: int) -> InputError:
    return InputError(f"{path.name}: {size / 2**20:.1f} MiB, more than the {limit // 2**20} MiB a result file "
                      "may be: not read")


def _read_at_most(fd: int, n: int) -> bytes:
    """Up to n bytes from fd (fewer only at the end of the file), in chunks: nothing is allocated
    for bytes the file does not have."""
    chunks = []
    while n > 0 and (chunk := os.read(fd, min(n, 2**20))):
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_bytes(path: pathlib.Path, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file at `path`, if it holds at most `limit`; else InputError."""
    try:
        # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer (it is then
        # refused below); it changes nothing for a regular file.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise InputError(f"{path.name}: cannot be opened ({e.strerror})") from e
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{path.name}: not a regular file ({_kind(info.st_mode)}): not read")
        if info.st_size > limit:
            raise _too_large(path, info.st_size, limit)
        try:
            data = _read_at_most(fd, limit + 1)  # one byte past the limit: a file that grew since fstat shows it
        except OSError as e:
            raise InputError(f"{path.name}: cannot be read ({e.strerror})") from e
        if len(data) > limit:
            raise _too_large(path, len(data), limit)
        return data
    finally:
        os.close(fd)


def read_json(path: pathlib.Path, limit: int = MAX_INPUT_BYTES) -> object:
    """The JSON value in the file at `path` (NaN and Infinity accepted, as Google Benchmark writes
    them); InputError if it cannot be read or is not JSON."""
    data = read_bytes(path, limit)
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InputError(f"{path.name}: unreadable, not UTF-8 text (byte {e.start})") from e
    except RecursionError as e:
        raise InputError(f"{path.name}: unreadable, not JSON (nested too deeply)") from e
    except ValueError as e:  # json.JSONDecodeError, and an integer with too many digits
        raise InputError(f"{path.name}: unreadable, not JSON ({e})") from e
