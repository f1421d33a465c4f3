"""Reading trainmem's token file (the format is specified in common/data/token_file.h):

  offset  size  field
  0       8     magic "TMTOKENS"
  8       4     version (uint32, little-endian) = 1
  12      4     dtype   (uint32) = 1: uint16 tokens
  16      8     token count (uint64)
  24      8     reserved
  32      2*n   the tokens, uint16 little-endian

The same checks as trainmem's reader: the magic, the version, the dtype, and a size of exactly
32 + 2 * count bytes. The file is written by `trainmem tokens` (suites/trainmem/cli_tokens.cpp).
"""
from __future__ import annotations

import array
import pathlib
import struct
import sys

MAGIC = b"TMTOKENS"
VERSION = 1
DTYPE_UINT16 = 1
HEADER = struct.Struct("<8sIIQ8s")  # 32 bytes


class TokenFileError(ValueError):
    """A token file that cannot be used; the message names the file and what is wrong."""


def read_token_file(path: str | pathlib.Path) -> array.array:
    """The tokens of a .tok file, as an array of uint16 ('H')."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise TokenFileError(f"{path}: not a regular file")
    data = path.read_bytes()
    if len(data) < HEADER.size:
        raise TokenFileError(f"{path}: {len(data)} bytes, shorter than the {HEADER.size}-byte header")
    magic, version, dtype, count, _ = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise TokenFileError(f"{path}: not a trainmem token file (magic {magic!r}, expected {MAGIC!r})")
    if version != VERSION:
        raise TokenFileError(f"{path}: token file version {version}, this reader knows version {VERSION}")
    if dtype != DTYPE_UINT16:
        raise TokenFileError(f"{path}: token dtype {dtype}, expected {DTYPE_UINT16} (uint16)")
    if len(data) != HEADER.size + 2 * count:
        raise TokenFileError(f"{path}: the header says {count} tokens ({HEADER.size + 2 * count} bytes), "
                             f"the file has {len(data)} bytes (truncated?)")
    tokens = array.array("H")
    tokens.frombytes(data[HEADER.size:])
    if sys.byteorder != "little":
        tokens.byteswap()
    return tokens
