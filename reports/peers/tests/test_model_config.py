"""The model description the PyTorch models read (reports/peers/model_config.py), from trainmem's JSON."""
from __future__ import annotations

import pytest

from reports.peers.model_config import ModelConfig

LLAMA = {"name": "custom", "arch": "llama", "vocab": 256, "seq": 64, "layers": 2, "heads": 4, "dim": 64,
         "kv_heads": 2, "ffn_dim": 176, "rope_theta": 10000.0, "norm_eps": 1e-5,
         "head_dim": 16, "tied_head": False, "qkv_bias": False}
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192.0}


def test_a_plain_llama_is_read_with_its_shape():
    config = ModelConfig.from_trainmem(LLAMA)
    assert (config.kv_heads, config.ffn_dim, config.head_dim) == (2, 176, 16)
    assert (config.tied_head, config.qkv_bias, config.head_dim_set, config.rope_scaling) == (False, False, None, None)
    assert config == ModelConfig("custom", 256, 64, 2, 4, 64, "llama", 2, 176)  # the plain Llama's defaults
    assert {k: config.to_json()[k] for k in LLAMA} == LLAMA


def test_the_variants_are_read_and_written_back():
    model = {**LLAMA, "head_dim": 32, "tied_head": True, "qkv_bias": True, "rope_scaling": LLAMA3_SCALING}
    config = ModelConfig.from_trainmem(model)
    config.validate()
    assert (config.tied_head, config.qkv_bias, config.head_dim_set, config.head_dim) == (True, True, 32, 32)
    assert config.rope_scaling == LLAMA3_SCALING
    assert {k: config.to_json()[k] for k in model} == model


def test_a_head_dimension_is_a_llamas_and_need_not_divide():
    # C = 66 is not divisible by H = 4, but D is set (Mistral NeMo's way); a GPT takes no D of its own.
    ModelConfig.from_trainmem({**LLAMA, "dim": 66, "head_dim": 16}).validate()
    with pytest.raises(ValueError, match="--dim 66 is not divisible by --heads 4 \\(or set the head dimension"):
        ModelConfig("custom", 256, 64, 2, 4, 66, "llama", 2, 176).validate()
    with pytest.raises(ValueError, match="a GPT's head dimension is --dim / --heads; --head-dim 32"):
        ModelConfig("custom", 256, 64, 2, 4, 64, head_dim_set=32).validate()
    with pytest.raises(ValueError, match="the head dimension --head-dim = 15 is odd"):
        ModelConfig.from_trainmem({**LLAMA, "head_dim": 15}).validate()


@pytest.mark.parametrize("change", [{"factor": 0.5}, {"low_freq_factor": 4.0},
                                    {"original_max_position_embeddings": 0.0}, {"rope_type": "yarn"}])
def test_a_rope_scaling_trainmem_refuses_is_refused(change):
    config = ModelConfig.from_trainmem({**LLAMA, "rope_scaling": {**LLAMA3_SCALING, **change}})
    with pytest.raises(ValueError, match="rope"):
        config.validate()


# A mixture of experts as trainmem's JSON writes it (llama-small-moe's "experts" object): 8 experts
# of width 96, top 2, a shared expert of 128.
MOE = {**LLAMA, "experts": {"experts": 8, "experts_per_token": 2, "expert_ffn_dim": 96, "shared_expert_ffn_dim": 128,
                            "normalize_top_k": True, "router_aux_loss_coef": 0.02}}


def test_a_mixture_of_experts_is_read_and_written_back():
    config = ModelConfig.from_trainmem(MOE)
    config.validate()
    assert config.moe and not ModelConfig.from_trainmem(LLAMA).moe
    assert (config.experts, config.experts_per_token, config.expert_ffn_dim, config.shared_expert_ffn_dim,
            config.normalize_top_k, config.router_aux_loss_coef) == (8, 2, 96, 128, True, 0.02)
    assert {k: config.to_json()[k] for k in MOE} == MOE
    assert "experts" not in ModelConfig.from_trainmem(LLAMA).to_json()  # a dense model writes none, as trainmem
    # what is left out is the default: no shared expert, renormalized, no load-balancing loss
    config = ModelConfig.from_trainmem({**LLAMA, "experts": {"experts": 4, "experts_per_token": 1, "expert_ffn_dim": 8}})
    config.validate()
    assert (config.shared_expert_ffn_dim, config.normalize_top_k, config.router_aux_loss_coef) == (0, True, 0.0)


@pytest.mark.parametrize("change, message", [
    ({"experts": 1}, "--experts 1: a mixture has 2 to 4096 experts"),
    ({"experts": 4097}, "--experts 4097: a mixture has 2 to 4096 experts"),
    ({"experts_per_token": 0}, "--experts-per-token 0: each token reaches 1 to --experts \\(8\\) experts"),
    ({"experts_per_token": 9}, "--experts-per-token 9: each token reaches 1 to --experts \\(8\\) experts"),
    ({"expert_ffn_dim": 0}, "--expert-ffn-dim must be at least 1"),
    ({"router_aux_loss_coef": -0.5}, "--router-aux-loss must be a finite number >= 0"),
    ({"router_aux_loss_coef": float("inf")}, "--router-aux-loss must be a finite number >= 0"),
    ({"router_aux_loss_coef": float("nan")}, "--router-aux-loss must be a finite number >= 0")])
def test_a_mixture_trainmem_refuses_is_refused_by_its_field(change, message):
    """ModelConfig::validate_experts's rules and words (the flag that sets the field)."""
    config = ModelConfig.from_trainmem({**MOE, "experts": {**MOE["experts"], **change}})
    with pytest.raises(ValueError, match=message):
        config.validate()


@pytest.mark.parametrize("change, message", [
    ({"experts": "8"}, "experts.experts is a whole number, not '8'"),
    ({"expert_ffn_dim": 9.5}, "experts.expert_ffn_dim is a whole number, not 9.5"),
    ({"experts_per_token": True}, "experts.experts_per_token is a whole number, not True"),
    ({"normalize_top_k": 1}, "experts.normalize_top_k is true or false, not 1"),
    ({"router_aux_loss_coef": "0.01"}, "experts.router_aux_loss_coef is a number, not '0.01'"),
    ({"capacity_factor": 1.25}, "experts.capacity_factor is not a field of a mixture")])
def test_an_experts_object_of_other_fields_or_types_is_refused_by_name(change, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_trainmem({**MOE, "experts": {**MOE["experts"], **change}})
    with pytest.raises(ValueError, match='"experts" is an object'):
        ModelConfig.from_trainmem({**MOE, "experts": 8})


def test_a_mixture_is_a_llamas_and_needs_its_experts():
    gpt = {"name": "custom", "arch": "gpt", "vocab": 256, "seq": 64, "layers": 2, "heads": 4, "dim": 64}
    with pytest.raises(ValueError, match="a mixture of experts is the Llama family's \\(add --arch llama\\)"):
        ModelConfig.from_trainmem({**gpt, "experts": MOE["experts"]}).validate()
    with pytest.raises(ValueError, match="describe a mixture of experts: give --experts E too"):
        ModelConfig.from_trainmem({**MOE, "experts": {**MOE["experts"], "experts": 0}}).validate()


def test_the_mixtures_flags_reach_trainmem():
    """trainmem_program.shape_args writes a mixture's flags as trainmem reads them (--router-aux-loss
    is the JSON's router_aux_loss_coef)."""
    from reports.peers.trainmem_program import shape_args
    assert shape_args({"experts": 4, "shared_expert_ffn_dim": 0, "normalize_top_k": False, "router_aux_loss": 0.02}) \
        == ["--experts", "4", "--shared-expert-ffn-dim", "0", "--normalize-top-k", "false", "--router-aux-loss", "0.02"]
