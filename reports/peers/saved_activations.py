"""The tensors autograd saves for backward, counted with torch.autograd.graph.saved_tensors_hooks.

Every tensor packed for backward is recorded once per storage: a view of a tensor already saved
(the flattened input of a linear layer, q and k taken from one buffer) adds no bytes, and its
bytes are its storage's. Each storage is counted in the part of the model that made it (the
model tells, see torch_gpt.py's `regions`): "embedding", "h0" .. "h{L-1}", "head", as trainmem's
tensor names say where its activations are made. Storages of the model's parameters and of the
batch (tokens, targets) are recorded apart: they are not activations.

A model may also name a tensor it makes that has no counterpart in trainmem (`regions.extra(t, why)`:
torch_llama.py's RoPE tables, RMSNorm's normalized input, SwiGLU's silu): if autograd saves it, the
record says why it is PyTorch's extra. It is counted in the part that made it.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch


class NoRegions:
    """What a forward is given when nobody counts saved tensors."""
    def enter(self, name: str) -> None: ...
    def made(self, tensor: torch.Tensor) -> None: ...
    def extra(self, tensor: torch.Tensor, why: str) -> None: ...


@dataclass
class SavedTensor:
    region: str        # "embedding", "h3", "head"
    kind: str          # "activation", "parameter" or "input"
    shape: list[int]   # of the first tensor saved on this storage
    dtype: str         # "float32", "bfloat16", "bool", "int64"
    bytes: int         # the storage's
    extra: str | None = None  # why trainmem has no such tensor, where the model said so

    def to_json(self) -> dict:
        return {"region": self.region, "kind": self.kind, "shape": self.shape, "dtype": self.dtype,
                "bytes": self.bytes, **({"extra": self.extra} if self.extra else {})}


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _alive(notes: dict[int, tuple], t: torch.Tensor):
    """What `notes` says of t's storage, if the tensor it was said of still lives."""
    ref, note = notes.get(_storage(t), (lambda: None, None))
    return note if ref() is not None else None


@dataclass
class SavedTensorLog:
    """Use as `with log.recording(parameters, inputs): loss = model(x, y, regions=log)`."""
    saved: dict[int, SavedTensor] = field(default_factory=dict)  # storage address -> first record
    _region: str = "outside"
    _made_in: dict[int, tuple] = field(default_factory=dict)  # storage -> (weak reference to the tensor, region)
    _kinds: dict[int, str] = field(default_factory=dict)
    _extras: dict[int, tuple] = field(default_factory=dict)  # storage -> (weak reference to the tensor, why)

    # --- what the model calls (torch_gpt.py's `regions`)
    def enter(self, name: str) -> None:
        self._region = name

    # Weakly: the log keeps nothing alive, and a dead tensor's address, reused by another, is not
    # taken for it (in bf16, RMSNorm saves an fp32 copy and the residual x_l itself dies unsaved).
    def made(self, tensor: torch.Tensor) -> None:
        if _alive(self._made_in, tensor) is None:
            self._made_in[_storage(tensor)] = (weakref.ref(tensor), self._region)

    def extra(self, tensor: torch.Tensor, why: str) -> None:
        self.made(tensor)
        self._extras[_storage(tensor)] = (weakref.ref(tensor), why)

    # --- recording
    def recording(self, parameters, inputs):
        self.saved.clear()
        self._made_in.clear()
        self._extras.clear()
        self._kinds = {_storage(p): "parameter" for p in parameters}
        self._kinds.update({_storage(t): "input" for t in inputs})
        return torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        key = _storage(t)
        if key not in self.saved:
            self.saved[key] = SavedTensor(region=_alive(self._made_in, t) or self._region,
                                          kind=self._kinds.get(key, "activation"), shape=list(t.shape),
                                          dtype=str(t.dtype).removeprefix("torch."),
                                          bytes=t.untyped_storage().nbytes(), extra=_alive(self._extras, t))
        return t

    # --- results
    def activations(self) -> list[SavedTensor]:
        return [s for s in self.saved.values() if s.kind == "activation"]

    def bytes_by_region(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.activations():
            out[s.region] = out.get(s.region, 0) + s.bytes
        return out
