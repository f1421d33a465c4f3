"""The model description the PyTorch models read (reports/peers/model_config.py), from trainmem's JSON."""
from __future__ import annotations

import pytest

from reports.peers.model_config import ModelConfig

LLAMA = {"name": "custom", "arch": "llama", "vocab": 256, "seq": 64, "layers": 2, "heads": 4, "dim": 64,
         "kv_heads": 2, "ffn_dim": 176, "rope_theta": 10000.0, "norm_eps": 1e-5,
         "head_dim": 16, "tied_head": False, "qkv_bias": False}


def test_a_plain_llama_is_read_with_its_shape():
    config = ModelConfig.from_trainmem(LLAMA)
    assert (config.kv_heads, config.ffn_dim, config.head_dim) == (2, 176, 16)


@pytest.mark.parametrize("change, named", [({"tied_head": True}, "tied_head"), ({"qkv_bias": True}, "qkv_bias"),
                                           ({"head_dim": 32}, "head_dim 32")])
def test_a_variant_the_torch_models_lack_is_refused_by_name(change, named):
    # Compared with a model of another shape, the side-by-side peaks would be wrong without a word.
    with pytest.raises(ValueError, match=f"the PyTorch reference has no {named}"):
        ModelConfig.from_trainmem({**LLAMA, **change})
