"""The model description both PyTorch families read (common/model/model_config.h), one for GPT-2 and
Llama as trainmem has one: the presets are trainmem's (trainmem_program.py asks trainmem for them).
A Llama may have a mixture of experts in every layer's MLP (Mixtral, Qwen2-MoE): trainmem's JSON
then has an "experts" object (ModelConfig::to_json), read and written back here.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

VOCAB_ALIGNMENT = 64  # model_config.h's kVocabAlignment
MAX_EXPERTS = 4096    # model_config.h's kMaxExperts
ARCHS = ("gpt", "llama")
# The "experts" object of trainmem's JSON: its keys, in to_json's order (each a ModelConfig field here).
EXPERTS_KEYS = ("experts", "experts_per_token", "expert_ffn_dim", "shared_expert_ffn_dim", "normalize_top_k",
                "router_aux_loss_coef")


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
    # The Llama family's variants (a GPT's head is always tied, its linears always have biases).
    tied_head: bool = False       # llama: the LM head is wte (no head.weight)
    qkv_bias: bool = False        # llama: biases on the q, k, v projections, h{l}.attn.qkv.bias
    head_dim_set: int | None = None   # llama: D where it is not C / H (None: C / H)
    rope_scaling: dict | None = None  # llama: Llama 3.1's rescaling of RoPE's frequencies, as trainmem's JSON
                                      # writes it: {"rope_type": "llama3", "factor", "low_freq_factor",
                                      # "high_freq_factor", "original_max_position_embeddings"}
    # Llama: a mixture of experts (model_config.h; 0 experts is the dense MLP of width F, which a
    # mixture does not read): E experts, each a SwiGLU MLP of width Fe, k of them per token.
    experts: int = 0                   # E
    experts_per_token: int = 0         # k
    expert_ffn_dim: int = 0            # Fe
    shared_expert_ffn_dim: int = 0     # Fs: one more expert that every token reaches, gated (Qwen2-MoE); 0: none
    normalize_top_k: bool = True       # the k routing weights divided by their sum (Mixtral; Qwen2-MoE's norm_topk_prob)
    router_aux_loss_coef: float = 0.0  # the load-balancing loss's weight in the loss; 0: not added

    @classmethod
    def from_trainmem(cls, model: dict) -> "ModelConfig":
        """From the "model" object of trainmem's JSON (ModelConfig::to_json), or any dict that names
        its fields the same way (a variant left out is the plain Llama's)."""
        arch = model.get("arch", "gpt")
        config = cls(name=model["name"], arch=arch, **{k: model[k] for k in shape_of(arch)})
        if arch == "llama":
            D = model.get("head_dim")  # trainmem writes it always; it is set only where it is not C / H
            config = dataclasses.replace(config, tied_head=model.get("tied_head", False),
                                         qkv_bias=model.get("qkv_bias", False),
                                         head_dim_set=D if D is not None and D * config.heads != config.dim else None,
                                         rope_scaling=model.get("rope_scaling"))
        if "experts" in model:  # a mixture of experts (absent for a dense model)
            experts = model["experts"]
            if not isinstance(experts, dict):
                raise ValueError(f"model '{config.name}': \"experts\" is an object "
                                 f"{{{', '.join(EXPERTS_KEYS)}}}, not {experts!r}")
            unknown = sorted(set(experts) - set(EXPERTS_KEYS))
            if unknown:
                raise ValueError(f"model '{config.name}': experts.{unknown[0]} is not a field of a mixture "
                                 f"(those are {', '.join(EXPERTS_KEYS)})")
            for key, value in experts.items():
                kind = {"normalize_top_k": (bool,), "router_aux_loss_coef": (int, float)}.get(key, (int,))
                if not isinstance(value, kind) or (isinstance(value, bool) and bool not in kind):
                    raise ValueError(f"model '{config.name}': experts.{key} is "
                                     f"{'true or false' if bool in kind else 'a number' if float in kind else 'a whole number'}, "
                                     f"not {value!r}")
            config = dataclasses.replace(config, **experts)
        return config

    @property
    def moe(self) -> bool:  # model_config.h's moe(): a mixture of experts in every layer
        return self.arch == "llama" and self.experts > 0

    @property
    def padded_vocab(self) -> int:
        """Vp: model_config.h's padded_vocab(V), V rounded up to a multiple of 64 (wte's rows)."""
        return -(-self.vocab // VOCAB_ALIGNMENT) * VOCAB_ALIGNMENT

    @property
    def head_dim(self) -> int:  # D, as model_config.h's head_dim()
        return self.head_dim_set if self.arch == "llama" and self.head_dim_set else self.dim // self.heads

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
        if self.arch == "gpt" and self.head_dim_set and self.head_dim_set * self.heads != self.dim:
            raise ValueError(model + f"a GPT's head dimension is --dim / --heads; --head-dim {self.head_dim_set} is "
                                     "the Llama family's (add --arch llama)")
        if not self.head_dim_set and self.dim % self.heads:
            raise ValueError(model + f"--dim {self.dim} is not divisible by --heads {self.heads}" +
                             (" (or set the head dimension: --head-dim)" if self.arch == "llama" else ""))
        if self.vocab > 65536:
            raise ValueError(model + "--vocab above 65536 does not fit the uint16 token format")
        if self.arch == "gpt":
            if self.experts or self.experts_per_token or self.expert_ffn_dim or self.shared_expert_ffn_dim:
                raise ValueError(model + "a mixture of experts is the Llama family's (add --arch llama)")
            return
        if self.heads % self.num_kv_heads:
            raise ValueError(model + f"--heads {self.heads} is not a multiple of --kv-heads {self.num_kv_heads} "
                                     "(each K/V head serves heads / kv-heads query heads)")
        if self.head_dim % 2:
            raise ValueError(model + f"the head dimension {'--head-dim' if self.head_dim_set else '--dim / --heads'} "
                                     f"= {self.head_dim} is odd: rotary embeddings rotate pairs of channels")
        if not (math.isfinite(self.rope_theta) and self.rope_theta > 1):
            raise ValueError(model + "--rope-theta must be a finite number above 1")
        if self.rope_scaling is not None:
            self.validate_rope_scaling(model)
        if not (math.isfinite(self.norm_eps) and 0 < self.norm_eps < 1):
            raise ValueError(model + "--norm-eps must be a number between 0 and 1 (excluded)")
        self.validate_experts(model)

    def validate_experts(self, model: str) -> None:
        """ModelConfig::validate_experts: E, k, Fe and the coefficient of a mixture (none without one)."""
        if self.experts == 0:
            if self.experts_per_token or self.expert_ffn_dim or self.shared_expert_ffn_dim or self.router_aux_loss_coef:
                raise ValueError(model + "--experts-per-token, --expert-ffn-dim, --shared-expert-ffn-dim and "
                                         "--router-aux-loss describe a mixture of experts: give --experts E too")
            return
        if not 2 <= self.experts <= MAX_EXPERTS:
            raise ValueError(model + f"--experts {self.experts}: a mixture has 2 to {MAX_EXPERTS} experts")
        if not 1 <= self.experts_per_token <= self.experts:
            raise ValueError(model + f"--experts-per-token {self.experts_per_token}: each token reaches 1 to "
                                     f"--experts ({self.experts}) experts")
        if self.expert_ffn_dim < 1:
            raise ValueError(model + "--expert-ffn-dim must be at least 1")
        if self.shared_expert_ffn_dim < 0:
            raise ValueError(model + "--shared-expert-ffn-dim must be at least 0 (0: no shared expert)")
        if not (math.isfinite(self.router_aux_loss_coef) and self.router_aux_loss_coef >= 0):
            raise ValueError(model + "--router-aux-loss must be a finite number >= 0")

    def validate_rope_scaling(self, model: str) -> None:
        """kernels/rope_frequencies.h's check (RopeFrequencies::check), for the one scaling trainmem has."""
        s = self.rope_scaling
        if s.get("rope_type") != "llama3":
            raise ValueError(model + f"rope_scaling {s.get('rope_type')!r}: only Llama 3.1's \"llama3\" is modelled")
        factor, low, high, context = (s["factor"], s["low_freq_factor"], s["high_freq_factor"],
                                      s["original_max_position_embeddings"])
        if not (factor >= 1 and 0 < low < high and context > 0 and all(map(math.isfinite, (factor, high, context)))):
            raise ValueError(model + "rope: llama3 rope scaling needs factor >= 1, 0 < low_freq_factor < "
                                     "high_freq_factor and an original context above 0")

    def to_json(self) -> dict:
        """As trainmem writes a model (ModelConfig::to_json), less the parameter count."""
        out = {"name": self.name, "arch": self.arch, "vocab": self.vocab, "padded_vocab": self.padded_vocab,
               "seq": self.seq, "layers": self.layers, "heads": self.heads, "kv_heads": self.num_kv_heads,
               "dim": self.dim, "ffn_dim": self.mlp_dim}
        if self.arch == "llama":
            out.update(rope_theta=self.rope_theta, norm_eps=self.norm_eps, head_dim=self.head_dim,
                       tied_head=self.tied_head, qkv_bias=self.qkv_bias)
            if self.rope_scaling is not None:
                out["rope_scaling"] = self.rope_scaling
            if self.moe:
                out["experts"] = {k: getattr(self, k) for k in EXPERTS_KEYS}
        return out
