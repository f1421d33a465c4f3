"""torch_llama.py's parts against their formulas, written out here the slow way (no trainmem needed;
test_same_weights.py holds the whole model against trainmem's losses): RoPE pairs element i with
i + D/2, grouped-query attention gives query head h the K/V head h // (H / Hkv), with the q/k/v
biases and a head dimension other than C / H where the config has them, RMSNorm divides by the root
mean square, the head is the model's own (untied) or wte (tied), and Llama 3.1's rope scaling
rescales each frequency by its wavelength."""
from __future__ import annotations

import dataclasses
import math
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3]))  # `reports.peers`, as from the root
torch = pytest.importorskip("torch", reason="PyTorch is not installed (optional: ci/setup-torch, then run these "
                                            "tests with .venv-torch/bin/python -m pytest reports/peers/tests)")

from reports.peers.model_config import ModelConfig  # noqa: E402
from reports.peers.torch_llama import Llama  # noqa: E402

CONFIG = ModelConfig(name="custom", vocab=50, seq=6, layers=1, heads=6, dim=24, arch="llama", kv_heads=2,
                     ffn_dim=20, rope_theta=100.0, norm_eps=1e-5)
# The variants: q/k/v biases and D = 6, not C / H = 4 (attention's output is H D = 36 wide), a tied head.
VARIANTS = dataclasses.replace(CONFIG, qkv_bias=True, head_dim_set=6, tied_head=True)


def rotated(v: torch.Tensor, t: int, theta: float) -> torch.Tensor:
    """kernels/rope.h, element by element."""
    D, out = v.shape[-1], v.clone()
    for i in range(D // 2):
        angle = t * theta ** (-2 * i / D)
        out[..., i] = v[..., i] * math.cos(angle) - v[..., i + D // 2] * math.sin(angle)
        out[..., i + D // 2] = v[..., i] * math.sin(angle) + v[..., i + D // 2] * math.cos(angle)
    return out


@pytest.mark.parametrize("config", [CONFIG, VARIANTS], ids=["plain", "variants"])
def test_attention_is_grouped_query_attention_with_rope(config):
    torch.manual_seed(0)
    model = Llama(config).double()
    attn, (B, T, C), H, Hkv, D = model.h[0].attn, (2, 5, 24), 6, 2, config.head_dim
    x = torch.randn(B, T, C, dtype=torch.float64)
    cos, sin = model.rope_tables(T, torch.float64, x.device)
    qkv = x @ attn.qkv.weight.T  # rows: H q heads, then Hkv k heads, then Hkv v heads
    if config.qkv_bias:
        assert not attn.qkv.bias.any()  # zeros at first (parameter_table.h), drawn here to be seen
        with torch.no_grad():
            attn.qkv.bias.normal_()
        qkv = qkv + attn.qkv.bias
    got = attn(x, cos, sin, torch.ones(T, T, dtype=torch.bool).triu(1))

    head = lambda n, t: qkv[:, t, n * D:(n + 1) * D]  # noqa: E731
    y = torch.zeros(B, T, H * D, dtype=torch.float64)
    for h in range(H):
        kv = h // (H // Hkv)
        for t in range(T):
            q = rotated(head(h, t), t, config.rope_theta)
            scores = torch.stack([(q * rotated(head(H + kv, s), s, config.rope_theta)).sum(-1) for s in range(t + 1)],
                                 dim=-1) / math.sqrt(D)
            values = torch.stack([head(H + Hkv + kv, s) for s in range(t + 1)], dim=1)
            y[:, t, h * D:(h + 1) * D] = (scores.softmax(-1)[..., None] * values).sum(1)
    torch.testing.assert_close(got, y @ attn.proj.weight.T, rtol=1e-12, atol=1e-12)


def test_rmsnorm_and_the_untied_head():
    torch.manual_seed(0)
    model = Llama(CONFIG).double()
    norm = model.h[0].mlp_norm
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(3, 24, dtype=torch.float64)
    expected = x / torch.sqrt((x * x).mean(-1, keepdim=True) + CONFIG.norm_eps) * norm.weight
    torch.testing.assert_close(norm(x), expected, rtol=1e-12, atol=1e-12)
    assert model.head.weight.data_ptr() != model.wte.weight.data_ptr()
    assert [n for n, _ in model.named_parameters()][-2:] == ["norm.weight", "head.weight"]


def test_a_tied_head_is_wte():
    """Tied, the model has no head.weight (the table ends with norm.weight) and its logits are
    norm(x_L) @ wte^T: the loss of an untied model whose head is a copy of wte."""
    torch.manual_seed(0)
    tied = Llama(VARIANTS)
    assert not hasattr(tied, "head") and [n for n, _ in tied.named_parameters()][-1] == "norm.weight"
    untied = Llama(dataclasses.replace(VARIANTS, tied_head=False))
    with torch.no_grad():
        for name, p in tied.named_parameters():
            untied.get_parameter(name).copy_(p)
        untied.head.weight.copy_(tied.wte.weight)
    x, y = torch.randint(0, 50, (2, 6)), torch.randint(0, 50, (2, 6))
    assert tied(x, y).item() == untied(x, y).item()


def test_llama3_rope_scaling_rescales_each_frequency_by_its_wavelength():
    """kernels/rope_frequencies.h's rule, one frequency at a time: with L0 = 64, theta 10000 and D = 16
    the wavelengths 2 pi / theta^(-2i/D) fall in all three bands (kept below L0 / 4 = 16, divided by
    the factor above L0 / 1 = 64, blended between), and the tables turn position t by t freq_i."""
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64.0}
    config = dataclasses.replace(CONFIG, heads=2, kv_heads=1, dim=32, rope_theta=10000.0, rope_scaling=scaling)
    model = Llama(config)
    bands = []
    for i, got in enumerate(model.rope_frequencies(torch.device("cpu")).tolist()):
        freq = 10000.0 ** (-2 * i / 16)
        wavelength = 2 * math.pi / freq
        if wavelength < 64 / 4:
            bands.append("kept")
            expected = freq
        elif wavelength > 64 / 1:
            bands.append("divided")
            expected = freq / 8
        else:
            bands.append("blended")
            s = (64 / wavelength - 1) / (4 - 1)
            expected = (1 - s) * freq / 8 + s * freq
        assert got == pytest.approx(expected, rel=1e-15), i
    assert bands == ["kept"] + ["blended"] * 2 + ["divided"] * 5
    cos, sin = model.rope_tables(5, torch.float64, torch.device("cpu"))
    angles = torch.arange(5, dtype=torch.float64)[:, None] * model.rope_frequencies(torch.device("cpu"))
    torch.testing.assert_close(cos[:, :8], angles.cos(), rtol=0, atol=0)
    torch.testing.assert_close(sin[:, 8:], angles.sin(), rtol=0, atol=0)
