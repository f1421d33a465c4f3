"""torch_llama.py's parts against their formulas, written out here the slow way (no trainmem needed;
test_same_weights.py holds the whole model against trainmem's losses): RoPE pairs element i with
i + D/2, grouped-query attention gives query head h the K/V head h // (H / Hkv), with the q/k/v
biases and a head dimension other than C / H where the config has them, RMSNorm divides by the root
mean square, the head is the model's own (untied) or wte (tied), Llama 3.1's rope scaling
rescales each frequency by its wavelength, and the mixture of experts sends each token to its k
most probable experts (and the shared one), its load-balancing loss counting the choices."""
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
from reports.peers.torch_llama import Llama, SparseMoE, load_balancing_loss  # noqa: E402

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


# A mixture: 5 experts of width 7, top 2, a shared expert of width 9 (Qwen2-MoE's shape).
MOE = dataclasses.replace(CONFIG, experts=5, experts_per_token=2, expert_ffn_dim=7, shared_expert_ffn_dim=9)


def swiglu(mlp, x: torch.Tensor) -> torch.Tensor:
    silu = lambda v: v / (1 + torch.exp(-v))  # noqa: E731
    return (silu(x @ mlp.gate.weight.T) * (x @ mlp.up.weight.T)) @ mlp.down.weight.T


@pytest.mark.parametrize("config", [MOE, dataclasses.replace(MOE, shared_expert_ffn_dim=0, normalize_top_k=False)],
                         ids=["shared-renormalized", "plain-not-renormalized"])
def test_the_mixture_sends_each_token_to_its_k_most_probable_experts(config):
    """Token by token: p = softmax(n Wr^T), its k largest p_e, w = p_e / sum (or p_e), y = sum_j w_j
    expert_{e_j}(n) (+ sigmoid(n . w_sg) shared(n)); the parameters in parameter_table.h's order."""
    torch.manual_seed(0)
    model = Llama(config).double()
    moe = model.h[0].mlp
    assert isinstance(moe, SparseMoE)
    names = [n for n, _ in model.named_parameters() if n.startswith("h.0.mlp.")]
    experts = [f"h.0.mlp.experts.{e}.{w}.weight" for e in range(5) for w in ("gate", "up", "down")]
    shared = ["h.0.mlp.shared_expert.gate.weight", "h.0.mlp.shared_expert.up.weight",
              "h.0.mlp.shared_expert.down.weight", "h.0.mlp.shared_expert_gate.weight"]
    assert names == ["h.0.mlp.router.weight"] + experts + (shared if config.shared_expert_ffn_dim else [])
    assert [model.init_kind(n) for n in experts[:3]] == ["normal", "normal", "residual"]
    x = torch.randn(2, 6, 24, dtype=torch.float64)
    got = moe(x)
    for b in range(2):
        for t in range(6):
            n = x[b, t]
            p = torch.softmax(moe.router.weight @ n, dim=-1)
            order = sorted(range(5), key=lambda e: -p[e].item())[:2]
            w = [p[e] / (sum(p[i] for i in order) if config.normalize_top_k else 1) for e in order]
            y = sum(w_j * swiglu(moe.experts[e], n) for w_j, e in zip(w, order))
            if config.shared_expert_ffn_dim:
                y = y + torch.sigmoid(moe.shared_expert_gate.weight[0] @ n) * swiglu(moe.shared_expert, n)
            torch.testing.assert_close(got[b, t], y, rtol=1e-12, atol=1e-12)


def test_an_expert_no_token_chose_gets_a_zero_gradient():
    """Every expert runs, on no rows if need be: its gradient is zeros, not None, as trainmem's (AdamW
    moves a weight with a zero gradient and non-zero moments; a None would freeze it)."""
    torch.manual_seed(0)
    moe = Llama(MOE).double().h[0].mlp
    with torch.no_grad():
        moe.router.weight.zero_()
        moe.router.weight[:, 0] = torch.tensor([3.0, 2.0, 0.0, 0.0, 0.0])  # x[..., 0] > 0: experts 0 and 1
    x = torch.randn(2, 6, 24, dtype=torch.float64)
    x[..., 0] = x[..., 0].abs() + 1
    moe(x).sum().backward()
    for e, expert in enumerate(moe.experts):
        assert all(p.grad is not None and (p.grad.any() == (e < 2)) for p in expert.parameters()), e


def test_the_load_balancing_loss_counts_the_choices_of_all_layers():
    """aux = E sum_e f_e P_e over all layers' rows: f_e = (choices equal to e) / (L N), P_e = mean p_e
    (transformers' load_balancing_loss_func); its gradient reaches the probabilities only."""
    torch.manual_seed(0)
    E, k = 5, 2
    layers = [torch.randn(12, E, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    aux = load_balancing_loss(layers, E, k)
    rows = torch.cat(layers).detach()
    p = torch.softmax(rows, dim=-1)
    counts = [sum(int(e in torch.topk(p[r], k).indices.tolist()) for r in range(36)) for e in range(E)]
    assert sum(counts) == 36 * k
    expected = E * sum(counts[e] / 36 * p[:, e].mean() for e in range(E))
    assert aux.item() == pytest.approx(expected.item(), rel=1e-12)
    aux.backward()
    # d aux / d p[row, e] = E c_e / (L N)^2, through the softmax to the logits
    dp = torch.tensor([E * c / 36**2 for c in counts], dtype=torch.float64).expand(36, E)
    dlogits = p * (dp - (p * dp).sum(-1, keepdim=True))
    torch.testing.assert_close(torch.cat([l.grad for l in layers]), dlogits, rtol=1e-12, atol=1e-15)
