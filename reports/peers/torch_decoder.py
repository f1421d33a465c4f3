"""What trainmem's two PyTorch reference models share (torch_gpt.py, torch_llama.py), as
common/model/model.h is what its two C++ families share: a decoder-only model built from one family's
ModelConfig, whose first parameter is the token embedding wte [Vp, C]; GPT-2's initialization by
each parameter's kind; and the loss over the padded logits.

A family builds its layers, final norm and head after Decoder.__init__ (so the parameters come in
common/model/parameter_table.h's order), says what kind each parameter is (init_kind), and then
calls init_parameters.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .model_config import ModelConfig


class Decoder(nn.Module):
    def __init__(self, c: ModelConfig, arch: str, family: str):
        """Refuses a config of another arch ("gpt", "llama"); `family` names the class in the error."""
        super().__init__()
        c.validate()
        if c.arch != arch:
            raise ValueError(f"model '{c.name}' is a {c.arch} model, not a {family}")
        self.config = c
        self.wte = nn.Embedding(c.padded_vocab, c.dim)  # [Vp, C]

    def init_kind(self, name: str) -> str:
        """parameter_table.h's ParameterInit of a parameter (by its module name): normal, residual,
        ones or zeros."""
        raise NotImplementedError

    @torch.no_grad()
    def init_parameters(self, vocabulary_tables: list[torch.Tensor]) -> None:
        """GPT-2's initialization, drawn by torch's generator in parameter order: ones, zeros,
        N(0, 0.02), the residual projections N(0, 0.02 / sqrt(2L)); then the vocabulary padding rows
        of `vocabulary_tables` (wte's weight, an untied head's) are zero whatever their kind says
        (no token reads them)."""
        residual_std = 0.02 / math.sqrt(2 * self.config.layers)
        for name, p in self.named_parameters():
            kind = self.init_kind(name)
            if kind in ("ones", "zeros"):
                p.fill_(1.0 if kind == "ones" else 0.0)
            else:
                p.normal_(0.0, residual_std if kind == "residual" else 0.02)
        for table in vocabulary_tables:
            table[self.config.vocab:].zero_()

    def sequence_length(self, tokens: torch.Tensor) -> int:
        """T of tokens [B, T]; longer than the model's context is an error."""
        _, T = tokens.shape
        if T > self.config.seq:
            raise ValueError(f"sequence of {T} tokens is longer than the model's context {self.config.seq}")
        return T

    def padded_loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The mean cross-entropy over the B*T positions of logits [B, T, Vp]. The Vp - V padded
        columns are no classes: -inf takes no probability and passes no gradient. Set in place
        (nothing saved the head's output), as trainmem keeps one [B, T, Vp] tensor."""
        B, T = targets.shape
        if self.config.padded_vocab > self.config.vocab:
            logits[..., self.config.vocab:] = float("-inf")
        return F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))
