"""The .tok reader of the PyTorch reference and `trainmem tokens`, which writes what it reads (no
torch needed: these run in ci/test; the trainmem tests need a build, else they are skipped)."""
from __future__ import annotations

import pathlib
import struct
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3]))  # `reports.peers`, as from the root
from reports.peers.token_file import HEADER, TokenFileError, read_token_file  # noqa: E402
from peer_fixtures import trainmem  # noqa: E402,F401  (the fixture)


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


def test_trainmem_tokens_writes_what_train_reads(trainmem, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_bytes(b"the same tokens, byte by byte\n" * 100)
    run = subprocess.run([str(trainmem), "tokens", "--data", str(text), "--out", str(tmp_path / "notes.tok")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert read_token_file(tmp_path / "notes.tok").tobytes()[::2] == text.read_bytes()  # little-endian, < 256

    subprocess.run([str(trainmem), "tokens", "--tokens", "5000", "--seed", "7", "--out", str(tmp_path / "a.tok")],
                   check=True, capture_output=True)
    subprocess.run([str(trainmem), "tokens", "--tokens", "5000", "--seed", "7", "--out", str(tmp_path / "b.tok")],
                   check=True, capture_output=True)
    synthetic = read_token_file(tmp_path / "a.tok")
    assert len(synthetic) == 5000 and max(synthetic) < 256
    assert (tmp_path / "a.tok").read_bytes() == (tmp_path / "b.tok").read_bytes()  # deterministic
    train = subprocess.run([str(trainmem), "train", "--model", "tiny", "--steps", "1", "--device", "cpu",
                            "--data", str(tmp_path / "a.tok")], capture_output=True, text=True)
    assert train.returncode == 0, train.stderr


def test_trainmem_tokens_bad_input_is_one_line(trainmem, tmp_path):
    for args, message in ((["--out", str(tmp_path / "no" / "x.tok")], "--out"),
                          (["--data", str(tmp_path / "missing"), "--out", str(tmp_path / "x.tok")], "no such file"),
                          (["--tokens", "1", "--out", str(tmp_path / "x.tok")], "--tokens")):
        run = subprocess.run([str(trainmem), "tokens", *args], capture_output=True, text=True)
        assert run.returncode == 2 and message in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert not (tmp_path / "x.tok").exists()
