"""The memory timeline of one training step, replayed from the allocator's recorded trace
(`trainmem train --record-memory`, common/allocator/memory_recorder.h):

  alloc                           the category's allocated bytes grow by the block's size
  free_requested / free_completed they shrink by it (once: whichever comes first, as
                                  allocated_bytes counts it)
  segment_alloc / segment_free    reserved bytes grow / shrink by the segment's size
  segment_map / segment_unmap     (expandable segments) the same, for mapped pages
  any other action                changes nothing here (oom, snapshot, ...)

Block sizes (`block_size`), not requested sizes, so that the categories sum to the allocator's
allocated_bytes exactly, after every event.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .result_schema import CATEGORIES

_RESERVE = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}


@dataclass
class Timeline:
    step: int
    x: list[int] = field(default_factory=list)                     # event number within the step
    by_category: dict[str, list[int]] = field(default_factory=dict)  # allocated bytes after each event
    reserved: list[int] = field(default_factory=list)
    phases: list[tuple[str, int, int]] = field(default_factory=list)  # (phase, first x, last x)

    def total(self) -> list[int]:
        return [sum(v[i] for v in self.by_category.values()) for i in range(len(self.x))]


class _Replay:
    """The allocator's state as the trace says it is after each event."""

    def __init__(self) -> None:
        self.live: dict[int, tuple[str, int]] = {}   # address -> (category, block size)
        self.allocated = {c: 0 for c in CATEGORIES}
        self.reserved = 0

    def apply(self, e: dict) -> None:
        action = e.get("action")
        if action == "alloc":
            category = e.get("category", "other")
            size = int(e.get("block_size", e.get("size", 0)))
            self.live[e["addr"]] = (category, size)
            self.allocated[category] = self.allocated.get(category, 0) + size
        elif action in ("free_requested", "free_completed") and e.get("addr") in self.live:
            category, size = self.live.pop(e["addr"])
            self.allocated[category] -= size
        elif action in _RESERVE:
            self.reserved += _RESERVE[action] * int(e.get("size", 0))


def complete_steps(trace: dict) -> list[int]:
    """Steps with events in their forward and their backward phase (an optimizer step allocates
    only at step 1, when Adam's moments appear; after that its phase has no events)."""
    phases: dict[int, set] = {}
    for e in trace.get("events", []):
        phases.setdefault(e.get("step", -1), set()).add(e.get("phase"))
    return sorted(s for s, p in phases.items() if s >= 1 and {"forward", "backward"} <= p)


def representative_step(trace: dict) -> int:
    """The last step whose events span forward, backward and optimizer (so that all three phases
    can be marked), else the last complete one. Raises ValueError if there is none."""
    steps = complete_steps(trace)
    if not steps:
        raise ValueError("the trace has no complete training step (no forward and backward events)")
    with_optimizer = {e.get("step") for e in trace.get("events", []) if e.get("phase") == "optimizer"}
    return max((s for s in steps if s in with_optimizer), default=steps[-1])


def peak_allocated(trace: dict) -> int:
    """The highest allocated bytes over the whole trace (the run's peak_allocated_bytes)."""
    replay, peak = _Replay(), 0
    for e in trace.get("events", []):
        replay.apply(e)
        peak = max(peak, sum(replay.allocated.values()))
    return peak


def step_timeline(trace: dict, step: int | None = None) -> Timeline:
    """The timeline of `step` (default: representative_step). Raises ValueError if the trace has
    no such step."""
    if step is None:
        step = representative_step(trace)
    replay = _Replay()
    t = Timeline(step=step, by_category={c: [] for c in CATEGORIES})
    for e in trace.get("events", []):
        replay.apply(e)
        if e.get("step") != step:
            continue
        x = len(t.x)
        t.x.append(x)
        for c in CATEGORIES:
            t.by_category[c].append(replay.allocated.get(c, 0))
        t.reserved.append(replay.reserved)
        phase = e.get("phase", "none")
        if t.phases and t.phases[-1][0] == phase:
            t.phases[-1] = (phase, t.phases[-1][1], x)
        else:
            t.phases.append((phase, x, x))
    if not t.x:
        raise ValueError(f"the trace has no events in step {step}")
    t.by_category = {c: v for c, v in t.by_category.items() if any(v)}
    return t
