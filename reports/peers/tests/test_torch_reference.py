"""The PyTorch reference against trainmem, both families (torch_gpt.py, torch_llama.py). Needs torch (ci/setup-torch; run with
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
from reports.peers.compare_torch import saved_comparison  # noqa: E402
from reports.peers.model_config import ModelConfig, trainmem_parameter_name  # noqa: E402
from reports.peers.saved_activations import SavedTensorLog  # noqa: E402
from reports.peers.token_file import read_token_file  # noqa: E402
from reports.peers.torch_train import FAMILIES, Batches  # noqa: E402
from reports.peers.trainmem_init import libstdcxx_linked  # noqa: E402
from reports.peers.trainmem_program import model_shape, shape_args  # noqa: E402
from peer_fixtures import LOSS_TOLERANCE, tokens, trainmem  # noqa: E402,F401  (the fixtures)

# The Llama's variants together: a tied head, q/k/v biases, D = 32 where C / H is 16.
VARIANTS = {"tied_head": True, "qkv_bias": True, "head_dim": 32}


def config_of(trainmem, model: str, **overrides) -> ModelConfig:
    return ModelConfig.from_trainmem(model_shape(trainmem, model, overrides))


@pytest.mark.parametrize("model, overrides", [("tiny", {}), ("small", {}), ("gpt2-124m", {}),
                                              ("gpt2-124m", {"layers": 2, "seq": 256}),
                                              ("llama-tiny", {}), ("llama-small", {}), ("llama-tiny", {"kv_heads": 1}),
                                              ("llama2-7b", {"layers": 2}), ("mistral-7b", {"layers": 1}),
                                              ("llama-tiny", VARIANTS),
                                              # the published variants, with a vocabulary that token files can hold
                                              ("qwen2.5-0.5b", {"layers": 2, "vocab": 32000}),
                                              ("mistral-nemo-12b", {"layers": 1, "vocab": 32000}),
                                              ("llama3.2-1b", {"layers": 1, "vocab": 32000}),
                                              # mixtures of experts: ours, Mixtral's, Qwen1.5-MoE's (shared expert)
                                              ("llama-tiny-moe", {}), ("llama-small-moe", {}),
                                              ("mixtral-8x7b", {"layers": 1}),
                                              ("qwen1.5-moe-a2.7b", {"layers": 1, "vocab": 32000})])
def test_parameter_count_is_trainmems(trainmem, model, overrides):
    shape = model_shape(trainmem, model, overrides)
    config = ModelConfig.from_trainmem(shape)
    assert config.padded_vocab == shape["padded_vocab"]  # model_config.h's padded_vocab, ported
    assert (config.num_kv_heads, config.mlp_dim) == (shape["kv_heads"], shape["ffn_dim"])
    with torch.device("meta"):  # shapes only, no memory
        assert sum(p.numel() for p in FAMILIES[config.arch](config).parameters()) == shape["parameters"]


@pytest.mark.parametrize("model, overrides", [("tiny", {}), ("llama-tiny", {}), ("llama-tiny", VARIANTS),
                                              ("llama-tiny-moe", {}), ("llama-small-moe", {})])
def test_parameters_are_trainmems_by_name_and_bytes(trainmem, tokens, tmp_path, model, overrides):
    """The model's parameters, in order, are the ones trainmem allocates (its trace names each):
    the same names (parameter_table.h's), the same bytes."""
    trace = tmp_path / "trace.json"
    subprocess.run([str(trainmem), "train", "--model", model, *shape_args(overrides), "--batch", "1", "--steps", "1",
                    "--data", str(tokens), "--device", "cpu", "--record-memory", str(trace)],
                   check=True, capture_output=True)
    tm = [(e["name"], e["size"]) for e in json.loads(trace.read_text())["events"]
          if e.get("action") == "alloc" and e.get("category") == "parameters"]
    config = config_of(trainmem, model, **overrides)
    with torch.device("meta"):
        pt = [(trainmem_parameter_name(n), 4 * p.numel()) for n, p in FAMILIES[config.arch](config).named_parameters()]
    assert pt == tm


@pytest.mark.parametrize("arch", ["gpt", "llama"])
def test_padded_vocabulary_is_trainmems_and_changes_nothing(arch):
    """V = 23 in rows of Vp = 64 (model_config.h): wte (and Llama's untied head) is [Vp, C] with zero
    padding rows; the padded logits take no probability (whatever the padding rows hold, the loss is
    the same: without the mask their logits would add to the log-sum-exp) and the padding rows get a
    gradient of 0."""
    config = ModelConfig(name="custom", vocab=23, seq=8, layers=1, heads=2, dim=8, arch=arch, kv_heads=1, ffn_dim=12)
    assert config.padded_vocab == 64 and ModelConfig("gpt2", 50257, 1024, 12, 12, 768).padded_vocab == 50304
    assert ModelConfig("tiny", 256, 64, 2, 4, 64).padded_vocab == 256
    torch.manual_seed(0)
    model = FAMILIES[arch](config)
    padded = [model.wte.weight] + ([model.head.weight] if arch == "llama" else [])
    assert all(tuple(w.shape) == (64, 8) and not w[23:].any() for w in padded)
    x, y = torch.randint(0, 23, (2, 8)), torch.randint(0, 23, (2, 8))
    loss = model(x, y)
    loss.backward()
    assert torch.isfinite(loss) and not any(w.grad[23:].any() for w in padded)
    with torch.no_grad():
        for w in padded:
            w[23:].normal_(0.0, 10.0)
        assert model(x, y).item() == loss.item()


def saved_both(trainmem, tokens, tmp_path, model: str, batch: int, precision: str,
               overrides: dict | None = None) -> tuple[ModelConfig, dict]:
    """One step of each on the same batch: trainmem's saved activations (its trace) against PyTorch's."""
    overrides = overrides or {}
    config = config_of(trainmem, model, **overrides)
    trace = tmp_path / "trace.json"
    subprocess.run([str(trainmem), "train", "--model", model, *shape_args(overrides), "--batch", str(batch),
                    "--steps", "1", "--precision", precision, "--data", str(tokens), "--device", "cpu",
                    "--record-memory", str(trace)], check=True, capture_output=True)
    tm = trainmem_saved.saved_activations(json.loads(trace.read_text()))
    torch.manual_seed(0)
    model = FAMILIES[config.arch](config).to(torch.bfloat16 if precision == "bf16" else torch.float32)
    x, y = Batches(read_token_file(tokens), batch, config.seq, torch.device("cpu")).next()
    log = SavedTensorLog()
    with log.recording(list(model.parameters()), (x, y)):
        model(x, y, regions=log).backward()
    return config, saved_comparison(tm, {"by_region": log.bytes_by_region(),
                                         "tensors": [t.to_json() for t in log.activations()]})


def extras_expected(config: ModelConfig, batch: int, dtype: str) -> list[tuple]:
    """GPT: a causal mask per layer, the positions, one scalar of the loss. Llama: one causal mask
    (made once, beside the embedding), the RoPE cos and sin tables [T, D]; per RMSNorm (two a layer,
    one in the head) its x * rstd [B, T, C]; per layer silu(gate) [B, T, F]; the loss's scalar."""
    T, B, C = config.seq, batch, config.dim
    if config.arch == "gpt":
        return sorted([("embedding", "int64", (T,)), ("head", dtype, ())] +
                      [(f"h{l}", "bool", (T, T)) for l in range(config.layers)])
    layers = [(f"h{l}", dtype, shape) for l in range(config.layers)
              for shape in ((B, T, C), (B, T, C), (B, T, config.mlp_dim))]
    return sorted([("embedding", "bool", (T, T)), ("embedding", dtype, (T, config.head_dim)),
                   ("embedding", dtype, (T, config.head_dim)), ("head", dtype, (B, T, C)), ("head", dtype, ())] +
                  layers)


def extras_found(comparison: dict) -> list[tuple]:
    return sorted((t["region"], t["dtype"], tuple(t["shape"])) for t in comparison["pytorch_extras"])


@pytest.mark.parametrize("model, batch, overrides", [("tiny", 2, {}), ("small", 4, {}), ("llama-tiny", 2, {}),
                                                     ("llama-small", 4, {}), ("llama-tiny", 2, VARIANTS)])
def test_saved_activations_are_trainmems_to_the_byte(trainmem, tokens, tmp_path, model, batch, overrides):
    """fp32: per part of the model, PyTorch saves trainmem's bytes plus its known extras, and only
    those (extras_expected)."""
    config, comparison = saved_both(trainmem, tokens, tmp_path, model, batch, "fp32", overrides)
    assert comparison["equal"], json.dumps(comparison["by_region"], indent=1)
    assert extras_found(comparison) == extras_expected(config, batch, "float32")


def test_bf16_differs_by_the_layernorm_statistics_only(trainmem, tokens, tmp_path):
    """bf16: PyTorch's CPU layer_norm keeps its mean and 1/std in bf16, trainmem in fp32
    (kernels/layernorm.h): 2 x B x T x 2 bytes fewer per layernorm (two a layer, one in the head)."""
    B = 2
    config, comparison = saved_both(trainmem, tokens, tmp_path, "tiny", B, "bf16")
    per_layernorm = 2 * B * config.seq * (4 - 2)
    for r in comparison["by_region"]:
        layernorms = {"embedding": 0, "head": 1}.get(r["region"], 2)
        assert r["trainmem_bytes"] - (r["pytorch_bytes"] - r["pytorch_extra_bytes"]) == layernorms * per_layernorm, r
    assert extras_found(comparison) == extras_expected(config, B, "bfloat16")


def test_llama_bf16_differs_by_the_rmsnorms_fp32_copies_only(trainmem, tokens, tmp_path):
    """bf16: Hugging Face's RMSNorm upcasts its input, and autograd saves that fp32 copy (4 BTC bytes,
    in the part that reads it) where trainmem saves the bf16 input itself (2 BTC bytes, x_l or
    residual2, in the part that makes it): trainmem saves 2 BTC bytes more beside the embedding (x0),
    4 BTC fewer per layer (two copies against residual2 and x_{l+1}) and in the head (x_L's copy)."""
    B = 2
    config, comparison = saved_both(trainmem, tokens, tmp_path, "llama-tiny", B, "bf16")
    BTC = B * config.seq * config.dim
    for r in comparison["by_region"]:
        expected = 2 * BTC if r["region"] == "embedding" else -4 * BTC
        assert r["trainmem_bytes"] - (r["pytorch_bytes"] - r["pytorch_extra_bytes"]) == expected, r
    assert extras_found(comparison) == extras_expected(config, B, "bfloat16")


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
    llama = ["--arch", "llama", "--layers", "1", "--heads", "4", "--dim", "8", "--seq", "8", "--vocab", "16",
             "--ffn-dim", "8", "--rope-theta", "10000", "--norm-eps", "1e-5"]
    run = subprocess.run([sys.executable, "-m", "reports.peers.torch_train", *llama, "--kv-heads", "3",
                          "--data", str(bad)], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 2 and run.stderr.strip().endswith(
        "--heads 4 is not a multiple of --kv-heads 3 (each K/V head serves heads / kv-heads query heads)"), run.stderr


@pytest.mark.parametrize("model, overrides", [("tiny", {}), ("llama-tiny", {}), ("llama-tiny", VARIANTS)])
def test_compare_torch_pairs_each_gradient_lifetime_with_pytorchs(trainmem, tmp_path, model, overrides):
    """One command, both pairings: trainmem --grads persistent beside PyTorch set_to_none=False keeps
    every gradient between steps on both sides; --grads on-demand beside set_to_none=True keeps none
    on either (PyTorch's gradients category is 0 when a step starts). A swapped pairing fails here.
    PyTorch starts from trainmem's weights: the losses agree (test_same_weights.py's tolerance).
    The shape flags reach both programs (the variants: --tied-head true ...)."""
    run = subprocess.run([sys.executable, "-m", "reports.peers.compare_torch", "--model", model, *shape_args(overrides),
                          "--batch", "2", "--rounds", "1", "--warmup", "1", "--steps", "1", "--out", str(tmp_path),
                          "--label", "run", "--trainmem", str(trainmem)], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    c = json.loads((tmp_path / "peer-torch-run.json").read_text())
    assert {k: c["config"]["model"][k] for k in overrides} == overrides
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
    assert c["config"]["model"]["arch"] == {"tiny": "gpt", "llama-tiny": "llama"}[model]
    for pairing in (persistent, on_demand):
        assert pairing["losses"]["init"] == "trainmem" and len(pairing["losses"]["pytorch"]) == 2
        if libstdcxx_linked(trainmem):
            assert pairing["losses"]["max_abs_difference"] <= LOSS_TOLERANCE, pairing["losses"]


def test_speed_torch_times_both_programs_under_each_family(trainmem, tmp_path):
    """speed_torch end to end on tiny, two families: every round of each family has both programs'
    times, the environment of a family reaches both (trainmem names its GEMM library, which a family
    cannot change), and PyTorch ran --time-only (no profiled step: no memory in its result)."""
    run = subprocess.run([sys.executable, "-m", "reports.peers.speed_torch", "--model", "tiny", "--batch", "2",
                          "--rounds", "2", "--warmup", "1", "--steps", "2", "--out", str(tmp_path),
                          "--family", "own", "--family", "other:TRAINMEM_CPU_THREADS=1",
                          "--trainmem", str(trainmem)], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    c = json.loads((tmp_path / "peer-speed-tiny-B2.json").read_text())
    assert [f["name"] for f in c["families"]] == ["own", "other"]
    assert c["families"][1]["env"] == {"TRAINMEM_CPU_THREADS": "1"}
    for f in c["families"]:
        assert len(f["trainmem"]["step_ms_per_round"]) == len(f["pytorch"]["step_ms_per_round"]) == 2
        assert f["ratio"] > 0 and f["trainmem"]["gemm"].split()[0] in ("oneMKL", "OpenBLAS")
    assert "--time-only" in c["commands"]["pytorch"] and len(c["machine"]["load_avg_per_round"]) == 2
