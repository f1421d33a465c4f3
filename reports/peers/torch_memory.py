"""The memory of one PyTorch training step, by category and at its peak.

CPU: torch.profiler with profile_memory=True; its memory timeline
(torch.profiler._memory_profiler.MemoryProfileTimeline, what prof.export_memory_timeline writes)
gives, after every allocator event of the step, the live bytes of each category PyTorch infers
from the data flow: PARAMETER, OPTIMIZER_STATE, INPUT, TEMPORARY, ACTIVATION, GRADIENT,
AUTOGRAD_DETAIL, and unknown. Tensors that were allocated before the step and touched in it
(parameters, Adam's moments, kept gradients) are counted from its start. The peak is the largest
sum over the step; the bytes are the tensors' own (the CPU allocator does not round). The first
row of the timeline holds only those earlier tensors (the profiler's PREEXISTING allocations, at
time -1): `at_start_bytes` is what the previous step left, what is held between steps (with
zero_grad(set_to_none=True), no gradients).
CUDA: the same timeline for the categories, and torch.cuda.memory_stats() for the caching
allocator's peak allocated and peak reserved (its bytes are rounded, as trainmem's are).

Each category is also given under trainmem's name (common/allocator/memory_category.h), summed
at every event before the peak is taken: PARAMETER parameters, GRADIENT gradients,
OPTIMIZER_STATE optimizer_state, ACTIVATION activations, INPUT data, TEMPORARY and
AUTOGRAD_DETAIL workspace (what lives inside one op or one backward step), unknown other.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile
from torch.profiler._memory_profiler import _CATEGORY_TO_INDEX, MemoryProfileTimeline

TRAINMEM_CATEGORY = {"PARAMETER": "parameters", "GRADIENT": "gradients", "OPTIMIZER_STATE": "optimizer_state",
                     "ACTIVATION": "activations", "INPUT": "data", "TEMPORARY": "workspace",
                     "AUTOGRAD_DETAIL": "workspace", "unknown": "other"}
# _coalesce_timeline's columns: column 0 is unused, category c is column _CATEGORY_TO_INDEX[c] + 1.
COLUMNS = {(c.name if c is not None else "unknown"): i + 1 for c, i in _CATEGORY_TO_INDEX.items()}


def timeline_figures(times: list[int], sizes: list[list[int]]) -> dict:
    """Peaks from a coalesced timeline ([times], [[bytes per column] per time])."""
    if not sizes:
        raise ValueError("the profiler recorded no memory events (profile_memory=True, record_shapes=True and "
                         "with_stack=True are needed)")
    totals = [sum(row) for row in sizes]
    at = max(range(len(totals)), key=totals.__getitem__)

    def mapped(row: list[int]) -> dict[str, int]:
        out = dict.fromkeys(TRAINMEM_CATEGORY.values(), 0)
        for name, column in COLUMNS.items():
            out[TRAINMEM_CATEGORY[name]] += row[column]
        return out

    by_trainmem = [mapped(row) for row in sizes]
    return {
        "peak_allocated_bytes": totals[at],
        "at_start_bytes": totals[0],
        "by_category": {c: {"peak_bytes": max(r[c] for r in by_trainmem), "at_peak_bytes": by_trainmem[at][c],
                            "at_start_bytes": by_trainmem[0][c]}
                        for c in by_trainmem[at]},
        "torch_categories": {name: {"peak_bytes": max(r[col] for r in sizes), "at_peak_bytes": sizes[at][col]}
                             for name, col in COLUMNS.items()},
        "timeline_events": len(times),
    }


def measure_step(step: Callable[[], object], device: torch.device) -> dict:
    """Runs `step` once under the profiler (and, on CUDA, between resets of the peak statistics)."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
    with profile(activities=activities, profile_memory=True, record_shapes=True, with_stack=True) as prof:
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
    timeline = MemoryProfileTimeline(prof._memory_profile())
    name = "cpu" if device.type == "cpu" else f"cuda:{device.index or 0}"
    figures = timeline_figures(*timeline._coalesce_timeline(name))
    figures["source"] = "torch.profiler memory timeline (MemoryProfileTimeline), one step after the timed steps"
    if device.type == "cuda":
        stats = torch.cuda.memory_stats(device)
        figures["timeline_peak_bytes"] = figures["peak_allocated_bytes"]
        figures["peak_allocated_bytes"] = stats["allocated_bytes.all.peak"]
        figures["peak_reserved_bytes"] = stats["reserved_bytes.all.peak"]
        figures["source"] = ("torch.cuda.memory_stats() (peaks); categories from the profiler's memory timeline, "
                             "one step after the timed steps")
    return figures
