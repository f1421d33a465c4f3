"""On the same weights and tokens, trainmem's losses and PyTorch's agree, step by step, for both
families: PyTorch starts from trainmem's own initial values (trainmem_init.py), reads the same
batches and runs the same AdamW with the same clipping (torch_train.py's Trainer).

The tolerance is the loss's fp32 rounding, not a fit to the figures: the two sides sum in other
orders (BLAS blocking, RMSNorm's statistics, the log-sum-exp), each order exact to a few units of
fp32's 2^-24 per operation; 64 units of ln(V) ~ 5.5 is 2.1e-5, and the differences seen are 1e-6.
A model that is not trainmem's -- a tied head, K/V heads taken in another order, RoPE's other pairing,
a GELU for the SiLU -- starts from the same numbers and ends 1e-4 or more apart within these steps.
Needs torch, a trainmem build, and a trainmem linked with libstdc++ (its normal_distribution is the
one reproduced); skipped, saying which is missing, otherwise.
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))  # `reports.peers`, as from the root
torch = pytest.importorskip("torch", reason="PyTorch is not installed (optional: ci/setup-torch, then run these "
                                            "tests with .venv-torch/bin/python -m pytest reports/peers/tests)")

from reports.peers.model_config import ModelConfig  # noqa: E402
from reports.peers.token_file import read_token_file  # noqa: E402
from reports.peers.torch_train import Batches, Trainer, make_model, parse_args  # noqa: E402
from reports.peers.trainmem_init import libstdcxx_linked  # noqa: E402
from reports.peers.trainmem_program import model_shape, shape_args  # noqa: E402
from peer_fixtures import LOSS_TOLERANCE, tokens, trainmem  # noqa: E402,F401  (the fixtures)

STEPS, BATCH, SEED = 5, 4, 3


@pytest.fixture(autouse=True)
def one_thread():
    """Small models: one thread, no OpenMP barrier to wait at on a busy machine (6x faster here)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def gcc_trainmem(trainmem):
    if not libstdcxx_linked(trainmem):
        pytest.skip(f"{trainmem} is not linked with libstdc++: trainmem_init.py reproduces libstdc++'s "
                    "normal_distribution, whose values another standard library does not draw")
    return trainmem


def losses_of_both(trainmem, tokens, tmp_path, model: str, overrides: dict) -> tuple[list[float], list[float]]:
    result = tmp_path / "train.json"
    subprocess.run([str(trainmem), "train", "--model", model, *shape_args(overrides), "--batch", str(BATCH),
                    "--steps", str(STEPS), "--seed", str(SEED), "--data", str(tokens), "--device", "cpu",
                    "--json", str(result)], check=True, capture_output=True)
    tm = [s["loss"] for s in json.loads(result.read_text())["steps"]]
    config = ModelConfig.from_trainmem(model_shape(trainmem, model, overrides))
    trainer = Trainer(make_model(config, "trainmem", SEED), parse_args(["--data", str(tokens)]))  # train's defaults
    batches = Batches(read_token_file(tokens), BATCH, config.seq, torch.device("cpu"))
    return tm, [trainer.step(batches)[0] for _ in range(STEPS)]


@pytest.mark.parametrize("model, overrides", [("tiny", {}), ("llama-tiny", {}), ("llama-tiny", {"kv_heads": 1}),
                                              ("llama-tiny", {"kv_heads": 4}), ("llama-small", {}),
                                              ("llama-tiny", {"rope_theta": 500000.0, "norm_eps": 1e-6})])
def test_the_losses_agree_on_trainmems_weights(gcc_trainmem, tokens, tmp_path, model, overrides):
    tm, pt = losses_of_both(gcc_trainmem, tokens, tmp_path, model, overrides)
    assert len(tm) == len(pt) == STEPS
    assert max(abs(a - b) for a, b in zip(tm, pt)) <= LOSS_TOLERANCE, list(zip(tm, pt))
    assert pt[-1] < pt[0] - 0.1  # and they learn: the agreement is not that of two constants
