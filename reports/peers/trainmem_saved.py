"""trainmem's tensors saved for backward, read from a `trainmem train --record-memory` trace: the
allocations of category `activations` in the forward of one step, each with its name
(common/model/gpt.cpp names every one) and the bytes asked for (`size`, before the allocator's
rounding, so that they compare with PyTorch's tensor bytes).

The names say which part of the model made each tensor, the regions saved_activations.py uses:
"x0" the embedding; "h3.<...>" and "x4" (its output) layer 3; "lnf", "lnf.mean", "lnf.rstd" and
"logits" the head.
"""
from __future__ import annotations

import re

_RESIDUAL = re.compile(r"^x(\d+)$")
_LAYER = re.compile(r"^h(\d+)\.")


def region_of(name: str) -> str:
    m = _RESIDUAL.match(name)
    if m:
        n = int(m.group(1))
        return "embedding" if n == 0 else f"h{n - 1}"
    m = _LAYER.match(name)
    return f"h{m.group(1)}" if m else "head"


def saved_activations(trace: dict, step: int = 1) -> list[dict]:
    """[{"name", "region", "bytes"}] in the order the forward of `step` allocated them."""
    out = []
    for e in trace["events"]:
        if e.get("action") == "alloc" and e.get("category") == "activations" and e.get("step") == step \
                and e.get("phase") == "forward":
            name = e.get("name", "")
            out.append({"name": name, "region": region_of(name), "bytes": int(e["size"])})
    if not out:
        raise ValueError(f"the trace has no activations allocated in the forward of step {step}")
    return out


def bytes_by_region(tensors: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in tensors:
        out[t["region"]] = out.get(t["region"], 0) + t["bytes"]
    return out
