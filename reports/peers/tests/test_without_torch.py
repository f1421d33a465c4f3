"""Without PyTorch (as in ci/test) the reference's commands say so in one line, exit 2."""
from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is not None,
                                reason="PyTorch is installed for this Python: the message given without it "
                                       "cannot be seen here")


@pytest.mark.parametrize("module", ["torch_train", "compare_torch", "torch_attention"])
def test_the_commands_say_that_torch_is_missing(module):
    run = subprocess.run([sys.executable, "-m", f"reports.peers.{module}", "--data", "x.tok"], cwd=REPO,
                         capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip().startswith(f"{module}: error: PyTorch is not installed")
    assert "ci/setup-torch" in run.stderr and "Traceback" not in run.stderr
