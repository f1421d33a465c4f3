"""Peers: the same training run in another framework, to put trainmem's figures beside them.

torch_gpt.py and torch_llama.py are trainmem's two model families (common/model/gpt.cpp, llama.cpp)
in PyTorch, picked by the config's arch (model_config.py); torch_train.py trains one and measures it,
from trainmem's own initial weights if asked (trainmem_init.py); compare_torch.py runs both programs
on the same tokens. PyTorch is optional (ci/setup-torch): nothing here is imported by the report
renderer, which reads only the JSON these write.
"""
