"""trainmem's Llama in PyTorch: the model of common/model/llama.cpp, layer for layer, written the way
a PyTorch user writes it (Hugging Face's modeling_llama style: nn.Linear, RMSNorm by hand,
rotate-half RoPE, a SwiGLU MLP, grouped-query attention by hand), with the config's variants
(model_config.h): a tied head, q/k/v biases, a head dimension D other than C / H, Llama 3.1's rope
scaling, a mixture of experts in every MLP (Mixtral, Qwen2-MoE: SparseMoE, below). A plain Llama
has none of them: no biases, an untied head, D = C / H, a dense MLP.

  x0      = wte[tokens]                                           (no position table)
  layer l: q, k, v = split(attn.qkv(rmsnorm(x_l)))                (H q heads, Hkv k and v heads of D;
                                                                   + attn.qkv.bias with qkv_bias)
           a = x_l + attn.proj(attention(rope(q), rope(k), v))    (causal, softmax(q k^T / sqrt(D));
                                                                   attn.proj maps H*D back to C)
           x_{l+1} = a + mlp.down(silu(mlp.gate(n)) * mlp.up(n)),  n = rmsnorm(a)
           (a mixture: x_{l+1} = a + sum_j w_j expert_{e_j}(n) over the router's k experts e_j of each
            token (+ sigmoid(n . w_sg) shared_expert(n)); each expert is such a SwiGLU, of width Fe)
  logits  = rmsnorm(x_L) @ head^T (wte^T where tied);   loss = mean cross-entropy over the B*T positions
            (+ router_aux_loss_coef * the load-balancing loss, where the coefficient is above 0)
  rmsnorm(x) = weight * x / sqrt(mean(x^2) + eps)
  rope: element i of a head at position t is paired with element i + D/2 and turned by
        t * freq_i, freq_i = theta^(-2i/D) or its llama3 rescaling (kernels/rope_frequencies.h);
        query head h reads K/V head h // (H / Hkv).

Grouped-query attention without copies: the H / Hkv query heads that share a K/V head are
consecutive, so their queries are one [G T, D] matrix per K/V head (G = H / Hkv) and K and V are
never repeated per query head (repeat_interleave would copy them, and autograd would save the copies).
The RoPE tables are computed in double and rounded once, as kernels/rope.h computes them (Hugging Face
computes the angles in fp32). The vocabulary is padded as torch_gpt.py says (wte and head have Vp
rows, the padded logits are -inf). Parameters as common/model/parameter_table.h lists them ("h.3.mlp.up.weight"
is trainmem's "h3.mlp.up.weight"), with its initialization: N(0, 0.02), the residual projections
(attn.proj, every SwiGLU's down: the MLP's, each expert's, the shared expert's) N(0, 0.02 / sqrt(2L)),
norm weights 1, the q/k/v biases and padding rows 0.

What PyTorch saves for backward that trainmem does not (each named through `regions.extra`, see
saved_activations.py): the RoPE cos and sin tables [T, D] (trainmem's kernel computes them on the
fly), each RMSNorm's normalized input x * rstd [B, T, C] (trainmem's backward rebuilds it from x and
rstd) and silu(gate) [B, T, F] (trainmem's SwiGLU backward recomputes it from gate); beside them,
as for the GPT, the causal mask and cross_entropy's scalar (compare_torch.py names those).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .model_config import ModelConfig
from .saved_activations import NoRegions
from .torch_decoder import Decoder


class RMSNorm(nn.Module):
    """Hugging Face's LlamaRMSNorm: statistics in fp32 (or wider), the weight applied in the model's dtype."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, regions=NoRegions()) -> torch.Tensor:
        x32 = x.to(torch.promote_types(x.dtype, torch.float32))
        normalized = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)
        regions.extra(normalized, "RMSNorm's x * rstd (the weight's product saves it; trainmem rebuilds it "
                                  "from x and rstd)")
        return self.weight * normalized


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) over the last dimension's halves."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    """llama.cpp's attention: fused qkv (q rows, then k, then v), RoPE on q and k, naive grouped-query
    attention (scores, mask, softmax, weighted sum), output projection."""

    def __init__(self, c: ModelConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.heads, c.num_kv_heads, c.head_dim
        self.qkv = nn.Linear(c.dim, (c.heads + 2 * c.num_kv_heads) * c.head_dim, bias=c.qkv_bias)  # [(H+2Hkv)D, C]
        self.proj = nn.Linear(c.heads * c.head_dim, c.dim, bias=False)                             # [C, H D]

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, future: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        H, Hkv, D = self.heads, self.kv_heads, self.head_dim
        G = H // Hkv
        q, k, v = self.qkv(x).split([H * D, Hkv * D, Hkv * D], dim=-1)
        q, k, v = (t.view(B, T, -1, D).transpose(1, 2) for t in (q, k, v))   # [B, heads, T, D]
        q, k = (t * cos + rotate_half(t) * sin for t in (q, k))              # RoPE
        scores = (q.reshape(B, Hkv, G * T, D) @ k.transpose(-2, -1)).view(B, H, T, T) * (1.0 / math.sqrt(D))
        probs = F.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        y = (probs.view(B, Hkv, G * T, T) @ v).view(B, H, T, D).transpose(1, 2).reshape(B, T, H * D)
        return self.proj(y)


class MLP(nn.Module):
    """SwiGLU of width F: down(silu(gate(x)) * up(x)). The dense MLP (F = ffn_dim), and in a mixture
    each expert (F = Fe) and the shared expert (F = Fs)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)  # [F, C]
        self.up = nn.Linear(dim, hidden, bias=False)    # [F, C]
        self.down = nn.Linear(hidden, dim, bias=False)  # [C, F]

    def forward(self, x: torch.Tensor, regions=NoRegions()) -> torch.Tensor:
        activated = F.silu(self.gate(x))
        regions.extra(activated, "silu(gate) (the product saves it; trainmem's SwiGLU backward recomputes it "
                                 "from gate)")
        return self.down(activated * self.up(x))


class Router(nn.Module):
    """Which k experts each token goes to, and with what weight (Mixtral's router, Qwen2-MoE's):
      p       = softmax(n Wr^T), in fp32 (or wider)         [N, E]
      e_1..k  = the k largest p (torch.topk)                 [N, k]
      w_j     = p_{e_j} / sum_j p_{e_j}  (normalize_top_k), else p_{e_j}; cast to n's dtype."""

    def __init__(self, c: ModelConfig):
        super().__init__()
        self.k, self.normalize = c.experts_per_token, c.normalize_top_k
        self.weight = nn.Parameter(torch.empty(c.experts, c.dim))  # Wr [E, C]

    def forward(self, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logits [N, E], the chosen experts [N, k], their weights [N, k]) of the tokens n [N, C]."""
        logits = F.linear(n, self.weight)
        probs = F.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
        chosen_probs, chosen = torch.topk(probs, self.k, dim=-1)
        if self.normalize:
            chosen_probs = chosen_probs / chosen_probs.sum(dim=-1, keepdim=True)
        return logits, chosen, chosen_probs.to(n.dtype)


class SparseMoE(nn.Module):
    """The mixture-of-experts MLP, as Hugging Face's MixtralSparseMoeBlock runs it: a loop over the
    experts, each on its own tokens (an index selection), its weighted outputs added back at those
    tokens (index_add_):
      y[t] = sum_j w_{t,j} expert_{e_{t,j}}(n[t])  (+ sigmoid(n[t] . w_sg) shared_expert(n[t]), Qwen2-MoE)
    Every expert runs, on no rows if no token chose it: its gradient is then zeros, not None, as
    trainmem's is (AdamW moves a weight whose gradient is 0 but whose moments are not)."""

    def __init__(self, c: ModelConfig):
        super().__init__()
        self.router = Router(c)
        self.experts = nn.ModuleList(MLP(c.dim, c.expert_ffn_dim) for _ in range(c.experts))
        self.shared = c.shared_expert_ffn_dim > 0
        if self.shared:
            self.shared_expert = MLP(c.dim, c.shared_expert_ffn_dim)
            self.shared_expert_gate = nn.Linear(c.dim, 1, bias=False)  # w_sg [1, C]

    def forward(self, x: torch.Tensor, regions=NoRegions(), router_logits: list | None = None) -> torch.Tensor:
        """y [B, T, C] of x = mlp_norm's output [B, T, C]; the router's logits are appended to
        router_logits where it is given (the load-balancing loss reads them)."""
        B, T, C = x.shape
        n = x.reshape(B * T, C)                                          # [N, C]
        logits, chosen, weights = self.router(n)
        if router_logits is not None:
            router_logits.append(logits)
        y = torch.zeros_like(n)
        # chosen_by[e, j, t]: token t's j-th choice is expert e
        chosen_by = F.one_hot(chosen, num_classes=len(self.experts)).permute(2, 1, 0)
        for e, expert in enumerate(self.experts):
            choice, token = torch.where(chosen_by[e])                    # expert e's (j, t) pairs
            out = expert(n[token], regions) * weights[token, choice, None]
            y.index_add_(0, token, out)
        if self.shared:
            y = y + torch.sigmoid(self.shared_expert_gate(n)) * self.shared_expert(n, regions)
        return y.view(B, T, C)


def load_balancing_loss(router_logits: list[torch.Tensor], experts: int, k: int) -> torch.Tensor:
    """The Switch Transformer's load-balancing loss over all layers' tokens at once (transformers'
    load_balancing_loss_func), on the L N rows of the layers' router logits:
      aux = E * sum_e f_e P_e,  f_e = (number of the k choices of all rows that are e) / (L N)
                                P_e = mean over the rows of p[row, e]
    f_e is a count (no gradient flows through it); P_e pulls the probabilities towards balance."""
    logits = torch.cat(router_logits)                                          # [L N, E]
    probs = F.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
    _, chosen = torch.topk(probs, k, dim=-1)
    f = F.one_hot(chosen, num_classes=experts).sum(dim=1).to(probs.dtype).mean(dim=0)  # [E]
    return experts * (f * probs.mean(dim=0)).sum()


class Block(nn.Module):
    """One layer, in parameter_table.h's order: attn_norm, attn.qkv (weight, then bias if any),
    attn.proj, mlp_norm, then the dense MLP's mlp.gate, mlp.up, mlp.down, or the mixture's
    mlp.router, mlp.experts.<e>.gate/up/down for each e, and mlp.shared_expert.gate/up/down and
    mlp.shared_expert_gate with a shared expert."""

    def __init__(self, c: ModelConfig):
        super().__init__()
        self.attn_norm = RMSNorm(c.dim, c.norm_eps)
        self.attn = Attention(c)
        self.mlp_norm = RMSNorm(c.dim, c.norm_eps)
        self.mlp = SparseMoE(c) if c.moe else MLP(c.dim, c.mlp_dim)

    def forward(self, x, cos, sin, future, regions=NoRegions(), router_logits: list | None = None) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x, regions), cos, sin, future)   # llama.cpp's residual2
        n = self.mlp_norm(x, regions)
        return x + (self.mlp(n, regions, router_logits) if isinstance(self.mlp, SparseMoE) else self.mlp(n, regions))


class Llama(Decoder):
    def __init__(self, c: ModelConfig):
        super().__init__(c, "llama", "Llama")                     # wte [Vp, C]
        self.h = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.dim, c.norm_eps)
        if c.tied_head:
            self.init_parameters([self.wte.weight])                   # the head is wte
        else:
            self.head = nn.Linear(c.dim, c.padded_vocab, bias=False)  # [Vp, C]
            self.init_parameters([self.wte.weight, self.head.weight])

    def init_kind(self, name: str) -> str:
        """parameter_table.h's ParameterInit of a parameter (by its module name): normal, residual,
        ones or zeros (the q/k/v biases); wte's and the head's padding rows are zero whatever it says."""
        if name.endswith("norm.weight"):
            return "ones"
        if name.endswith("qkv.bias"):
            return "zeros"
        # the residual projections: attn.proj, and every SwiGLU's down (the MLP's, each expert's, the shared one's)
        return "residual" if name.endswith(("attn.proj.weight", "down.weight")) else "normal"

    def rope_frequencies(self, device: torch.device) -> torch.Tensor:
        """freq_i = theta^(-2i/D), i < D/2, in double; with rope_scaling, Llama 3.1's rescaling of them,
        by wavelength (kernels/rope_frequencies.h has the rule, in the same operations)."""
        D = self.config.head_dim
        freq = self.config.rope_theta ** (-torch.arange(0, D, 2, dtype=torch.float64, device=device) / D)
        scaling = self.config.rope_scaling
        if scaling is None:
            return freq
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        context = scaling["original_max_position_embeddings"]
        wavelength = 2 * math.pi / freq
        s = (context / wavelength - low) / (high - low)
        blended = (1 - s) * freq / factor + s * freq
        return torch.where(wavelength < context / high, freq,
                           torch.where(wavelength > context / low, freq / factor, blended))

    def rope_tables(self, T: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of t * freq_i for t < T, i < D/2, each half repeated: [T, D], computed in double
        and rounded once to the model's dtype."""
        angles = torch.arange(T, dtype=torch.float64, device=device)[:, None] * self.rope_frequencies(device)
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor, regions=NoRegions()) -> torch.Tensor:
        """The mean cross-entropy loss (plus coef * the load-balancing loss, in a mixture whose
        router_aux_loss_coef is above 0); tokens and targets are int64 [B, T], T <= config.seq."""
        T = self.sequence_length(tokens)
        regions.enter("embedding")
        x = self.wte(tokens)
        regions.made(x)
        cos, sin = self.rope_tables(T, x.dtype, x.device)
        regions.extra(cos, "RoPE's cos table (trainmem's kernel computes it on the fly)")
        regions.extra(sin, "RoPE's sin table (trainmem's kernel computes it on the fly)")
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)  # position j > i, for every layer
        regions.made(future)
        c = self.config
        router_logits = [] if c.moe and c.router_aux_loss_coef > 0 else None  # kept only for the aux loss
        for l, block in enumerate(self.h):
            regions.enter(f"h{l}")
            x = block(x, cos, sin, future, regions, router_logits)
            regions.made(x)
        regions.enter("head")
        normed = self.norm(x, regions)
        logits = F.linear(normed, self.wte.weight) if c.tied_head else self.head(normed)  # [B, T, Vp]
        loss = self.padded_loss(logits, targets)
        if router_logits is not None:  # loss = CE + coef * aux
            loss = loss + c.router_aux_loss_coef * load_balancing_loss(router_logits, c.experts, c.experts_per_token)
        return loss
