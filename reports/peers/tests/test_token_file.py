"""The .tok reader of the PyTorch reference (no torch needed): trainmem's format and its checks."""
from __future__ import annotations

import pathlib
import struct
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3]))  # `reports.peers`, as from the root
from reports.peers.token_file import HEADER, TokenFileError, read_token_file  # noqa: E402


def write(path: pathlib.Path, tokens: list[int], magic=b"TMTOKENS", version=1, dtype=1, count=None) -> pathlib.Path:
    path.write_bytes(HEADER.pack(magic, version, dtype, len(tokens) if count is None else count, bytes(8)) +
                     struct.pack(f"<{len(tokens)}H", *tokens))
    return path


def test_reads_the_tokens(tmp_path):
    assert list(read_token_file(write(tmp_path / "a.tok", [0, 1, 65535, 300]))) == [0, 1, 65535, 300]


@pytest.mark.parametrize("kwargs, message", [
    ({"magic": b"NOTTOKEN"}, "not a trainmem token file"),
    ({"version": 2}, "version 2"),
    ({"dtype": 2}, "token dtype 2"),
    ({"count": 5}, "truncated"),
])
def test_a_bad_file_is_a_clear_error(tmp_path, kwargs, message):
    with pytest.raises(TokenFileError, match=message):
        read_token_file(write(tmp_path / "bad.tok", [1, 2, 3], **kwargs))


def test_a_folder_or_a_short_file_is_refused(tmp_path):
    with pytest.raises(TokenFileError, match="not a regular file"):
        read_token_file(tmp_path)
    (tmp_path / "short.tok").write_bytes(b"TMTOK")
    with pytest.raises(TokenFileError, match="shorter than the 32-byte header"):
        read_token_file(tmp_path / "short.tok")
