"""torch_llama.py's parts against their formulas, written out here the slow way (no trainmem needed;
test_same_weights.py holds the whole model against trainmem's losses): RoPE pairs element i with
i + D/2, grouped-query attention gives query head h the K/V head h // (H / Hkv), RMSNorm divides by
the root mean square, and the head is the model's own (untied)."""
from __future__ import annotations

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


def rotated(v: torch.Tensor, t: int, theta: float) -> torch.Tensor:
    """kernels/rope.h, element by element."""
    D, out = v.shape[-1], v.clone()
    for i in range(D // 2):
        angle = t * theta ** (-2 * i / D)
        out[..., i] = v[..., i] * math.cos(angle) - v[..., i + D // 2] * math.sin(angle)
        out[..., i + D // 2] = v[..., i] * math.sin(angle) + v[..., i + D // 2] * math.cos(angle)
    return out


def test_attention_is_grouped_query_attention_with_rope():
    torch.manual_seed(0)
    model = Llama(CONFIG).double()
    attn, (B, T, C), H, Hkv, D = model.h[0].attn, (2, 5, 24), 6, 2, 4
    x = torch.randn(B, T, C, dtype=torch.float64)
    cos, sin = model.rope_tables(T, torch.float64, x.device)
    got = attn(x, cos, sin, torch.ones(T, T, dtype=torch.bool).triu(1))

    qkv = x @ attn.qkv.weight.T  # rows: H q heads, then Hkv k heads, then Hkv v heads
    head = lambda n, t: qkv[:, t, n * D:(n + 1) * D]  # noqa: E731
    y = torch.zeros(B, T, C, dtype=torch.float64)
    for h in range(H):
        kv = h // (H // Hkv)
        for t in range(T):
            q = rotated(head(h, t), t, CONFIG.rope_theta)
            scores = torch.stack([(q * rotated(head(H + kv, s), s, CONFIG.rope_theta)).sum(-1) for s in range(t + 1)],
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
