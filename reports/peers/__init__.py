"""Peers: the same training run in another framework, to put trainmem's figures beside them.

torch_gpt.py is trainmem's GPT-2 (common/model/gpt.cpp) in PyTorch; torch_train.py trains it and
measures it; compare_torch.py runs both on the same tokens. PyTorch is optional (ci/setup-torch):
nothing here is imported by the report renderer, which reads only the JSON these write.
"""
