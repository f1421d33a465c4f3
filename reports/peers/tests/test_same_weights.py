"""On the same weights and tokens, trainmem's losses and gradient norms and PyTorch's agree, step by
step, for both families, the Llama's variants and its mixtures of experts: PyTorch starts from trainmem's own initial values
(trainmem_init.py), reads the same batches and runs the same AdamW with the same clipping
(torch_train.py's Trainer). The first step's loss and gradient norm are those of the initial
weights; the later ones, of the updates.

The tolerance is the loss's fp32 rounding, not a fit to the figures: the two sides sum in other
orders (BLAS blocking, RMSNorm's statistics, the log-sum-exp), each order exact to a few units of
fp32's 2^-24 per operation; 64 units of ln(V) ~ 5.5 is 2.1e-5, and the differences seen are 1e-6.
The gradient norms (about 2, below ln(V)) are held to the same tolerance.
A model that is not trainmem's -- a head tied where trainmem's is not, K/V heads taken in another
order, RoPE's other pairing, a GELU for the SiLU, no q/k/v biases, RoPE without its llama3 scaling;
in a mixture of experts the top-k weights renormalized where trainmem's are not, no shared expert,
no load-balancing loss -- starts from the same numbers and ends 1e-4 or more apart within these steps.
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
from reports.peers.trainmem_program import run_trainmem, shape_args  # noqa: E402
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


def steps_of_both(trainmem, tokens, tmp_path, model: list[str]) -> tuple[list[tuple], list[tuple]]:
    """(loss, gradient norm) of every step, trainmem's and PyTorch's, for the model that trainmem's
    arguments `model` describe (--model NAME or --hf-config FILE, and shape flags)."""
    result = tmp_path / "train.json"
    subprocess.run([str(trainmem), "train", *model, "--batch", str(BATCH), "--steps", str(STEPS), "--seed", str(SEED),
                    "--data", str(tokens), "--device", "cpu", "--json", str(result)], check=True, capture_output=True)
    tm = [(s["loss"], s["grad_norm"]) for s in json.loads(result.read_text())["steps"]]
    shape = json.loads(run_trainmem(trainmem, ["info", "--device", "cpu", *model, "--json"]).stdout)["model"]
    config = ModelConfig.from_trainmem(shape)
    trainer = Trainer(make_model(config, "trainmem", SEED), parse_args(["--data", str(tokens)]))  # train's defaults
    batches = Batches(read_token_file(tokens), BATCH, config.seq, torch.device("cpu"))
    return tm, [trainer.step(batches) for _ in range(STEPS)]


def assert_agree(tm: list[tuple], pt: list[tuple]) -> None:
    assert len(tm) == len(pt) == STEPS
    assert max(abs(a - b) for x, y in zip(tm, pt) for a, b in zip(x, y)) <= LOSS_TOLERANCE, list(zip(tm, pt))
    assert pt[-1][0] < pt[0][0] - 0.1  # and they learn: the agreement is not that of two constants


@pytest.mark.parametrize("model, overrides", [("tiny", {}), ("llama-tiny", {}), ("llama-tiny", {"kv_heads": 1}),
                                              ("llama-tiny", {"kv_heads": 4}), ("llama-small", {}),
                                              ("llama-tiny", {"rope_theta": 500000.0, "norm_eps": 1e-6}),
                                              ("llama-tiny", {"tied_head": True, "qkv_bias": True, "head_dim": 32}),
                                              # mixtures of experts: top 2 of 8, renormalized or not; a
                                              # shared expert and the load-balancing loss (about 0.04 of it)
                                              ("llama-tiny-moe", {}), ("llama-tiny-moe", {"normalize_top_k": False}),
                                              ("llama-small-moe", {"router_aux_loss": 0.02})])
def test_the_losses_agree_on_trainmems_weights(gcc_trainmem, tokens, tmp_path, model, overrides):
    assert_agree(*steps_of_both(gcc_trainmem, tokens, tmp_path, ["--model", model, *shape_args(overrides)]))


def test_llama3_rope_scaling_agrees(gcc_trainmem, tokens, tmp_path):
    """Llama 3.1's rope scaling, which only a Hugging Face config gives: a llama-tiny whose original
    context L0 = 64 is the whole context, so that every band of the rule turns the positions seen
    (torch_llama.py's rope_frequencies; without the scaling PyTorch ends 2e-4 apart)."""
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
              "intermediate_size": 176, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
              "vocab_size": 256, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 64}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert_agree(*steps_of_both(gcc_trainmem, tokens, tmp_path, ["--hf-config", str(tmp_path / "config.json")]))
