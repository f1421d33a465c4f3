"""The model description both PyTorch families read (common/model/model_config.h), one for GPT-2 and
Llama as trainmem has one: the presets are trainmem's (trainmem_program.py asks trainmem for them).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

VOCAB_ALIGNMENT = 64  # model_config.h's kVocabAlignment
ARCHS = ("gpt", "llama")


def shape_of(arch: str) -> tuple[str, ...]:
    """The fields that make a model of the family: GPT's five, and Llama's four more."""
    gpt = ("vocab", "seq", "layers", "heads", "dim")
    return gpt + (("kv_heads", "ffn_dim", "rope_theta", "norm_eps") if arch == "llama" else ())


def trainmem_parameter_name(module_name: str) -> str:
    """parameter_table.h's name of a PyTorch parameter: "h.3.attn.qkv.weight" -> "h3.attn.qkv.weight",
    "wte.weight" -> "wte" (the embeddings are named without ".weight"), "head.weight" as it is."""
    if module_name.startswith("h."):
        layer, rest = module_name[2:].split(".", 1)
        return f"h{layer}.{rest}"
    return module_name.removesuffix(".weight") if module_name in ("wte.weight", "wpe.weight") else module_name


@dataclass(frozen=True)
class ModelConfig:
    name: str
    vocab: int   # V
    seq: int     # T, the context length
    layers: int  # L
    heads: int   # H
    dim: int     # C
    arch: str = "gpt"
    kv_heads: int | None = None   # Hkv, llama's K/V heads (None: H, multi-head attention)
    ffn_dim: int | None = None    # F, llama's SwiGLU hidden size (a GPT's is 4C)
    rope_theta: float = 10000.0   # llama: the rotary embeddings' base
    norm_eps: float = 1e-5        # llama: RMSNorm's epsilon (GPT's layernorm: 1e-5 as well)

    @classmethod
    def from_trainmem(cls, model: dict) -> "ModelConfig":
        """From the "model" object of trainmem's JSON (ModelConfig::to_json)."""
        arch = model.get("arch", "gpt")
        config = cls(name=model["name"], arch=arch, **{k: model[k] for k in shape_of(arch)})
        # The Llama family's variants (a tied head, q/k/v biases, a head dimension other than C/H, rope scaling) are
        # not in the PyTorch models yet: refused rather than compared with a model of another shape.
        if arch == "llama":
            variants = [name for name, plain in (("tied_head", False), ("qkv_bias", False), ("rope_scaling", None))
                        if model.get(name, plain) != plain]
            if model.get("head_dim", config.head_dim) != config.head_dim:
                variants.append(f"head_dim {model['head_dim']} (not dim / heads = {config.head_dim})")
            if variants:
                raise ValueError(f"model '{config.name}': the PyTorch reference has no {', '.join(variants)} yet")
        return config

    @property
    def padded_vocab(self) -> int:
        """Vp: model_config.h's padded_vocab(V), V rounded up to a multiple of 64 (wte's rows)."""
        return -(-self.vocab // VOCAB_ALIGNMENT) * VOCAB_ALIGNMENT

    @property
    def head_dim(self) -> int:  # D
        return self.dim // self.heads

    @property
    def num_kv_heads(self) -> int:  # Hkv, as model_config.h's num_kv_heads()
        return self.kv_heads if self.arch == "llama" and self.kv_heads else self.heads

    @property
    def mlp_dim(self) -> int:  # F, as model_config.h's mlp_dim()
        return self.ffn_dim if self.arch == "llama" and self.ffn_dim else 4 * self.dim

    def validate(self) -> None:
        """ModelConfig::validate's rules, with its words."""
        model = f"model '{self.name}': "
        if self.arch not in ARCHS:
            raise ValueError(model + f"--arch {self.arch}: gpt or llama")
        if self.vocab < 2 or min(self.seq, self.layers, self.heads, self.dim, self.num_kv_heads, self.mlp_dim) < 1:
            raise ValueError(model + "vocab >= 2 and seq, layers, heads, kv-heads, dim, ffn-dim >= 1 are needed")
        if self.dim % self.heads:
            raise ValueError(model + f"--dim {self.dim} is not divisible by --heads {self.heads}")
        if self.vocab > 65536:
            raise ValueError(model + "--vocab above 65536 does not fit the uint16 token format")
        if self.arch == "gpt":
            return
        if self.heads % self.num_kv_heads:
            raise ValueError(model + f"--heads {self.heads} is not a multiple of --kv-heads {self.num_kv_heads} "
                                     "(each K/V head serves heads / kv-heads query heads)")
        if self.head_dim % 2:
            raise ValueError(model + f"the head dimension --dim / --heads = {self.head_dim} is odd: rotary "
                                     "embeddings rotate pairs of channels")
        if not (math.isfinite(self.rope_theta) and self.rope_theta > 1):
            raise ValueError(model + "--rope-theta must be a finite number above 1")
        if not (math.isfinite(self.norm_eps) and 0 < self.norm_eps < 1):
            raise ValueError(model + "--norm-eps must be a number between 0 and 1 (excluded)")

    def to_json(self) -> dict:
        """As trainmem writes a model (ModelConfig::to_json), less the parameter count."""
        out = {"name": self.name, "arch": self.arch, "vocab": self.vocab, "padded_vocab": self.padded_vocab,
               "seq": self.seq, "layers": self.layers, "heads": self.heads, "kv_heads": self.num_kv_heads,
               "dim": self.dim, "ffn_dim": self.mlp_dim}
        if self.arch == "llama":
            out.update(rope_theta=self.rope_theta, norm_eps=self.norm_eps)
        return out
