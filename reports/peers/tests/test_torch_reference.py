"""The PyTorch reference against trainmem. Needs torch (ci/setup-torch; run with
.venv-torch/bin/python -m pytest -rs reports/peers/tests) and the trainmem program (a build folder,
or TRAINMEM_BUILD_DIR); skipped, saying which is missing, otherwise: ci/test has no torch.
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

from reports.peers import trainmem_saved  # noqa: E402
from reports.peers.compare_torch import pytorch_extra, saved_comparison  # noqa: E402
from reports.peers.saved_activations import SavedTensorLog  # noqa: E402
from reports.peers.token_file import read_token_file  # noqa: E402
from reports.peers.torch_gpt import GPT, ModelConfig  # noqa: E402
from reports.peers.torch_train import Batches  # noqa: E402
from reports.peers.trainmem_program import model_shape, write_tokens  # noqa: E402
from peer_fixtures import trainmem  # noqa: E402,F401  (the fixture)


@pytest.fixture(scope="module")
def tokens(trainmem, tmp_path_factory) -> pathlib.Path:
    return write_tokens(trainmem, "synthetic", tmp_path_factory.mktemp("data") / "corpus.tok", seed=1)


def config_of(trainmem, model: str, **overrides) -> ModelConfig:
    shape = model_shape(trainmem, model, overrides)
    return ModelConfig(**{k: shape[k] for k in ("name", "vocab", "seq", "layers", "heads", "dim")})


@pytest.mark.parametrize("model, overrides", [("tiny", {}), ("small", {}), ("gpt2-124m", {}),
                                              ("gpt2-124m", {"layers": 2, "seq": 256})])
def test_parameter_count_is_trainmems(trainmem, model, overrides):
    shape = model_shape(trainmem, model, overrides)
    config = ModelConfig(**{k: shape[k] for k in ("name", "vocab", "seq", "layers", "heads", "dim")})
    assert config.padded_vocab == shape["padded_vocab"]  # model_config.h's padded_vocab, ported
    with torch.device("meta"):  # shapes only, no memory
        assert sum(p.numel() for p in GPT(config).parameters()) == shape["parameters"]


def test_padded_vocabulary_is_trainmems_and_changes_nothing():
    """V = 23 in rows of Vp = 64 (model_config.h): wte is [Vp, C] with zero padding rows; the padded
    logits take no probability (whatever the padding rows hold, the loss is the same: without the
    mask their logits would add to the log-sum-exp) and the padding rows get a gradient of 0."""
    config = ModelConfig(name="custom", vocab=23, seq=8, layers=1, heads=2, dim=8)
    assert config.padded_vocab == 64 and ModelConfig("gpt2", 50257, 1024, 12, 12, 768).padded_vocab == 50304
    assert ModelConfig("tiny", 256, 64, 2, 4, 64).padded_vocab == 256
    torch.manual_seed(0)
    gpt = GPT(config)
    assert tuple(gpt.wte.weight.shape) == (64, 8) and not gpt.wte.weight[23:].any()
    x, y = torch.randint(0, 23, (2, 8)), torch.randint(0, 23, (2, 8))
    loss = gpt(x, y)
    loss.backward()
    assert torch.isfinite(loss) and not gpt.wte.weight.grad[23:].any()
    with torch.no_grad():
        gpt.wte.weight[23:].normal_(0.0, 10.0)
        assert gpt(x, y).item() == loss.item()


def saved_both(trainmem, tokens, tmp_path, model: str, batch: int, precision: str) -> tuple[ModelConfig, dict]:
    """One step of each on the same batch: trainmem's saved activations (its trace) against PyTorch's."""
    config = config_of(trainmem, model)
    trace = tmp_path / "trace.json"
    subprocess.run([str(trainmem), "train", "--model", model, "--batch", str(batch), "--steps", "1",
                    "--precision", precision, "--data", str(tokens), "--device", "cpu",
                    "--record-memory", str(trace)], check=True, capture_output=True)
    tm = trainmem_saved.saved_activations(json.loads(trace.read_text()))
    torch.manual_seed(0)
    gpt = GPT(config).to(torch.bfloat16 if precision == "bf16" else torch.float32)
    x, y = Batches(read_token_file(tokens), batch, config.seq, torch.device("cpu")).next()
    log = SavedTensorLog()
    with log.recording(list(gpt.parameters()), (x, y)):
        gpt(x, y, regions=log).backward()
    return config, saved_comparison(tm, {"by_region": log.bytes_by_region(),
                                         "tensors": [t.to_json() for t in log.activations()]})


def extras_expected(config: ModelConfig, scalar_dtype: str) -> list[tuple]:
    T = config.seq
    return sorted([("embedding", "int64", (T,)), ("head", scalar_dtype, ())] +
                  [(f"h{l}", "bool", (T, T)) for l in range(config.layers)])


def extras_found(comparison: dict) -> list[tuple]:
    return sorted((t["region"], t["dtype"], tuple(t["shape"])) for t in comparison["pytorch_extras"])


@pytest.mark.parametrize("model, batch", [("tiny", 2), ("small", 4)])
def test_saved_activations_are_trainmems_to_the_byte(trainmem, tokens, tmp_path, model, batch):
    """fp32: per part of the model, PyTorch saves trainmem's bytes plus its known extras, and only
    those: a causal mask per layer, the positions, one scalar of the loss."""
    config, comparison = saved_both(trainmem, tokens, tmp_path, model, batch, "fp32")
    assert comparison["equal"], json.dumps(comparison["by_region"], indent=1)
    assert extras_found(comparison) == extras_expected(config, "float32")


def test_bf16_differs_by_the_layernorm_statistics_only(trainmem, tokens, tmp_path):
    """bf16: PyTorch's CPU layer_norm keeps its mean and 1/std in bf16, trainmem in fp32
    (kernels/layernorm.h): 2 x B x T x 2 bytes fewer per layernorm (two a layer, one in the head)."""
    B = 2
    config, comparison = saved_both(trainmem, tokens, tmp_path, "tiny", B, "bf16")
    per_layernorm = 2 * B * config.seq * (4 - 2)
    for r in comparison["by_region"]:
        layernorms = {"embedding": 0, "head": 1}.get(r["region"], 2)
        assert r["trainmem_bytes"] - (r["pytorch_bytes"] - r["pytorch_extra_bytes"]) == layernorms * per_layernorm, r
    assert extras_found(comparison) == extras_expected(config, "bfloat16")


def test_torch_train_writes_its_result_and_set_to_none_lowers_the_peak(trainmem, tokens, tmp_path):
    """The command end to end on tiny; keeping the gradients (set_to_none=False) raises the peak by
    at most the gradients' bytes (they are held at the start of backward, where the peak is)."""
    results = {}
    for keep in (False, True):
        out = tmp_path / f"keep{keep}.json"
        subprocess.run([sys.executable, "-m", "reports.peers.torch_train", "--model", "tiny", "--batch", "2",
                        "--data", str(tokens), "--warmup", "1", "--steps", "2", "--json", str(out),
                        "--trainmem", str(trainmem)] + (["--keep-grads"] if keep else []),
                       cwd=REPO, check=True, capture_output=True)
        results[keep] = json.loads(out.read_text())
    freed, kept = results[False], results[True]
    assert freed["config"]["model"]["parameters"] == model_shape(trainmem, "tiny", {})["parameters"]
    assert freed["config"]["set_to_none"] and not kept["config"]["set_to_none"]
    grads = 4 * freed["config"]["model"]["parameters"]
    assert kept["memory"]["by_category"]["gradients"]["peak_bytes"] == grads
    assert freed["memory"]["peak_allocated_bytes"] < kept["memory"]["peak_allocated_bytes"] <= \
        freed["memory"]["peak_allocated_bytes"] + grads
    assert len(freed["steps"]) == 3 and freed["step_ms_median"] > 0


def test_torch_train_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "bad.tok"
    bad.write_bytes(b"hello")
    run = subprocess.run([sys.executable, "-m", "reports.peers.torch_train", "--layers", "1", "--heads", "1",
                          "--dim", "4", "--seq", "8", "--vocab", "16", "--data", str(bad)],
                         cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip().endswith("shorter than the 32-byte header")
    run = subprocess.run([sys.executable, "-m", "reports.peers.torch_train", "--layers", "1", "--heads", "3",
                          "--dim", "4", "--seq", "8", "--vocab", "16", "--data", str(bad)],
                         cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 2 and "not divisible by --heads 3" in run.stderr


def test_compare_torch_pairs_each_gradient_lifetime_with_pytorchs(trainmem, tmp_path):
    """One command, both pairings: trainmem --grads persistent beside PyTorch set_to_none=False keeps
    every gradient between steps on both sides; --grads on-demand beside set_to_none=True keeps none
    on either (PyTorch's gradients category is 0 when a step starts). A swapped pairing fails here."""
    run = subprocess.run([sys.executable, "-m", "reports.peers.compare_torch", "--model", "tiny", "--batch", "2",
                          "--rounds", "1", "--warmup", "1", "--steps", "1", "--out", str(tmp_path),
                          "--trainmem", str(trainmem)], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    c = json.loads((tmp_path / "peer-torch-tiny-B2-fp32.json").read_text())
    parameters = c["config"]["model"]["parameters"]
    persistent, on_demand = c["pairings"]["persistent"], c["pairings"]["on-demand"]
    assert (persistent["trainmem"]["grads"], persistent["pytorch"]["set_to_none"]) == ("persistent", False)
    assert (on_demand["trainmem"]["grads"], on_demand["pytorch"]["set_to_none"]) == ("on-demand", True)
    assert persistent["pytorch"]["held_between_steps"]["gradients_bytes"] == 4 * parameters
    assert persistent["trainmem"]["held_between_steps"]["gradients_bytes"] >= 4 * parameters  # 512-byte blocks
    assert on_demand["pytorch"]["held_between_steps"]["gradients_bytes"] == 0
    assert on_demand["trainmem"]["held_between_steps"]["gradients_bytes"] == 0
    for side in ("trainmem", "pytorch"):
        assert on_demand[side]["peak_allocated_bytes"] < persistent[side]["peak_allocated_bytes"]
    assert len(c["goals"]) == 4 and len(c["machine"]["load_avg_per_round"]) == 1
    assert c["saved_activations"]["equal"]
