"""trainmem's GPT-2 in PyTorch: the model of common/model/gpt.cpp, layer for layer, written the way
a PyTorch user writes it (nanoGPT style: nn.Linear, nn.LayerNorm, attention by hand, GELU tanh,
the LM head tied to the token embedding), so that the reference is the ordinary PyTorch program.

  x0      = wte[tokens] + wpe[0..T)                              (embedding)
  layer l: a = x_l + attn.proj(attention(attn.qkv(ln1(x_l))))   (causal, softmax(q k^T / sqrt(D)))
           x_{l+1} = a + mlp.proj(gelu_tanh(mlp.fc(ln2(a))))
  logits  = lnf(x_L) @ wte^T;   loss = mean cross-entropy over the B*T positions

The vocabulary is padded as trainmem pads it (common/model/model_config.h): wte has Vp = V rounded up
to a multiple of 64 rows (50257 -> 50304), the padding rows start at zero, and the Vp - V padded
logits are set to -inf before the cross-entropy: they take no probability and get no gradient, so
the loss is the unpadded model's and the padding rows stay zero (AdamW: zero weight, zero gradient).
The parameter count and the logits' bytes are trainmem's ([B, T, Vp]).

The parameters are built from the config as common/model/parameter_table.cpp lists them (the
module names give "h.3.attn.qkv.weight" for trainmem's "h3.attn.qkv.weight"), with GPT-2's
initialization: N(0, 0.02), the two residual projections N(0, 0.02 / sqrt(2L)), biases 0,
layernorm weights 1 (parameter_table.h's ParameterInit), drawn by torch's generator; trainmem_init.py
gives trainmem's own values instead (torch_train --init trainmem).

A forward may be given `regions` (saved_activations.py): it is told where each part of the model
starts and which tensor each part hands on, so each saved tensor is counted in the part that made
it, as trainmem names its tensors ("x4" is made by layer 3).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .model_config import ModelConfig
from .saved_activations import NoRegions
from .torch_decoder import Decoder


class CausalSelfAttention(nn.Module):
    """gpt.cpp's naive attention (kernels/attention.h): scores, mask, softmax, weighted sum."""

    def __init__(self, c: ModelConfig):
        super().__init__()
        self.heads = c.heads
        self.qkv = nn.Linear(c.dim, 3 * c.dim)   # h{l}.attn.qkv.weight [3C, C], .bias [3C]
        self.proj = nn.Linear(c.dim, c.dim)      # h{l}.attn.proj.weight [C, C], .bias [C]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        H, D = self.heads, C // self.heads
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))   # [B, H, T, D]
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)  # position j > i
        probs = F.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        y = (probs @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(c.dim, 4 * c.dim)    # h{l}.mlp.fc.weight [4C, C], .bias [4C]
        self.proj = nn.Linear(4 * c.dim, c.dim)  # h{l}.mlp.proj.weight [C, 4C], .bias [C]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))  # kernels/gelu.h: GELU, tanh form


class Block(nn.Module):
    """One layer, in parameter_table.h's order: ln1, attn.qkv, attn.proj, ln2, mlp.fc, mlp.proj."""

    def __init__(self, c: ModelConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(c.dim)  # eps 1e-5, as kernels/layernorm.h
        self.attn = CausalSelfAttention(c)
        self.ln2 = nn.LayerNorm(c.dim)
        self.mlp = MLP(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))   # gpt.cpp's residual2
        return x + self.mlp(self.ln2(x))


class GPT(Decoder):
    def __init__(self, c: ModelConfig):
        super().__init__(c, "gpt", "GPT")        # wte [Vp, C], also the LM head (tied)
        self.wpe = nn.Embedding(c.seq, c.dim)    # [T, C]
        self.h = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.lnf = nn.LayerNorm(c.dim)
        self.init_parameters([self.wte.weight])

    def init_kind(self, name: str) -> str:
        """parameter_table.h's ParameterInit of a parameter (by its module name): normal, residual,
        ones or zeros; wte's padding rows are zero whatever it says."""
        if isinstance(self.get_submodule(name.rsplit(".", 1)[0]), nn.LayerNorm):
            return "ones" if name.endswith("weight") else "zeros"
        if name.endswith("bias"):
            return "zeros"
        return "residual" if name.endswith(("attn.proj.weight", "mlp.proj.weight")) else "normal"

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor, regions=NoRegions()) -> torch.Tensor:
        """The mean cross-entropy loss; tokens and targets are int64 [B, T], T <= config.seq."""
        T = self.sequence_length(tokens)
        regions.enter("embedding")
        positions = torch.arange(T, device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        regions.made(x)
        for l, block in enumerate(self.h):
            regions.enter(f"h{l}")
            x = block(x)
            regions.made(x)
        regions.enter("head")
        logits = F.linear(self.lnf(x), self.wte.weight)   # tied head, no bias: [B, T, Vp]
        return self.padded_loss(logits, targets)
