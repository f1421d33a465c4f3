"""The tensors autograd saves for backward, counted with torch.autograd.graph.saved_tensors_hooks.

Every tensor packed for backward is recorded once per storage: a view of a tensor already saved
(the flattened input of a linear layer, q and k taken from one buffer) adds no bytes, and its
bytes are its storage's. Each storage is counted in the part of the model that made it (the
model tells, see torch_gpt.py's `regions`): "embedding", "h0" .. "h{L-1}", "head", as trainmem's
tensor names say where its activations are made. Storages of the model's parameters and of the
batch (tokens, targets) are recorded apart: they are not activations.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class SavedTensor:
    region: str        # "embedding", "h3", "head"
    kind: str          # "activation", "parameter" or "input"
    shape: list[int]   # of the first tensor saved on this storage
    dtype: str         # "float32", "bfloat16", "bool", "int64"
    bytes: int         # the storage's

    def to_json(self) -> dict:
        return {"region": self.region, "kind": self.kind, "shape": self.shape, "dtype": self.dtype,
                "bytes": self.bytes}


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


@dataclass
class SavedTensorLog:
    """Use as `with log.recording(parameters, inputs): loss = model(x, y, regions=log)`."""
    saved: dict[int, SavedTensor] = field(default_factory=dict)  # storage address -> first record
    _region: str = "outside"
    _made_in: dict[int, str] = field(default_factory=dict)
    _kinds: dict[int, str] = field(default_factory=dict)

    # --- what the model calls (torch_gpt.py's `regions`)
    def enter(self, name: str) -> None:
        self._region = name

    def made(self, tensor: torch.Tensor) -> None:
        self._made_in.setdefault(_storage(tensor), self._region)

    # --- recording
    def recording(self, parameters, inputs):
        self.saved.clear()
        self._made_in.clear()
        self._kinds = {_storage(p): "parameter" for p in parameters}
        self._kinds.update({_storage(t): "input" for t in inputs})
        return torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        key = _storage(t)
        if key not in self.saved:
            self.saved[key] = SavedTensor(region=self._made_in.get(key, self._region),
                                          kind=self._kinds.get(key, "activation"), shape=list(t.shape),
                                          dtype=str(t.dtype).removeprefix("torch."),
                                          bytes=t.untyped_storage().nbytes())
        return t

    # --- results
    def activations(self) -> list[SavedTensor]:
        return [s for s in self.saved.values() if s.kind == "activation"]

    def bytes_by_region(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.activations():
            out[s.region] = out.get(s.region, 0) + s.bytes
        return out
