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
