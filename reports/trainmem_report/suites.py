"""The catalog of suites the report knows: which benchmark file each writes, how a benchmark's
name splits into a *group* (the model or shape being measured) and a *setting* (the technique
or option being compared within the group), and which counters its table shows.

A benchmark binary that is not in the catalog is still shown, with the generic split: the last
part of the name is the setting, the rest the group. A new suite joins by adding a line here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .results import Benchmark


def words(b: Benchmark) -> list[str]:
    """The parts of a benchmark's name that are not `key:value` arguments."""
    return [p for p in b.name.split("/") if ":" not in p]


def args(b: Benchmark) -> dict[str, str]:
    """The `key:value` parts of a benchmark's name, e.g. {"micro": "32", "K": "1"}."""
    return dict(p.split(":", 1) for p in b.name.split("/") if ":" in p)


def _plain(name: str) -> str:
    return name[3:] if name.startswith("BM_") else name


def generic_group(b: Benchmark) -> str:
    parts = b.name.split("/")
    return " ".join(_plain(p) for p in parts[:-1]) or _plain(parts[0])


def generic_setting(b: Benchmark) -> str:
    return b.name.split("/")[-1]


# Table columns: (counter, header, kind). kind: "bytes", "rate", "number". The time column
# (ms per iteration) always comes first.
MEMORY_COLUMNS = [("peak_allocated_bytes", "peak allocated", "bytes"),
                  ("peak_reserved_bytes", "peak reserved", "bytes")]


@dataclass(frozen=True)
class Suite:
    key: str
    title: str
    bench: str                      # the Google Benchmark file's stem, e.g. "bench_checkpointing"
    what: str                       # one line: what the suite compares
    group: Callable[[Benchmark], str] = generic_group
    setting: Callable[[Benchmark], str] = generic_setting
    columns: list = field(default_factory=lambda: list(MEMORY_COLUMNS))
    rank_by_time: bool = True       # compare the ranking of settings by time between devices


def _attention_group(b: Benchmark) -> str:
    a = args(b)
    return f"{words(b)[2]} T={a.get('T')} D={a.get('D')} causal={a.get('causal')}"


def _lazy_setting(b: Benchmark) -> str:
    return b.label.split()[-1] if b.label else generic_setting(b)


def _lazy_group(b: Benchmark) -> str:
    w = words(b)
    return "training step " + w[1] if w[0] == "BM_Train" and len(w) > 1 else "loader only"


SUITES: list[Suite] = [
    Suite("baseline", "Baseline training step", "bench_baseline",
          "one training step without any memory technique",
          group=lambda b: "train step", setting=lambda b: words(b)[1] if len(words(b)) > 1 else b.name,
          columns=MEMORY_COLUMNS + [("tokens_per_s", "tokens/s", "rate"), ("TFLOP_per_s", "TFLOP/s", "number")],
          rank_by_time=False),
    Suite("accumulation", "Gradient accumulation", "bench_accumulation",
          "micro-batch x accumulation steps at the same effective batch",
          group=lambda b: words(b)[1] if len(words(b)) > 1 else "model",
          setting=lambda b: f"{args(b).get('micro', '?')}x{args(b).get('K', '?')}",
          columns=MEMORY_COLUMNS + [("activations_peak_bytes", "activations peak", "bytes"),
                                    ("tokens_per_s", "tokens/s", "rate")]),
    Suite("checkpointing", "Activation checkpointing", "bench_checkpointing",
          "recompute policy (none, selective, every:2, full, sqrt) per model depth",
          group=lambda b: " ".join(b.name.split("/")[1:3]), setting=generic_setting,
          columns=MEMORY_COLUMNS + [("activations_peak_bytes", "activations peak", "bytes"),
                                    ("predicted_activations_peak_bytes", "predicted activations", "bytes"),
                                    ("tokens_per_s", "tokens/s", "rate")]),
    Suite("mixed_precision", "Mixed precision", "bench_mixed_precision",
          "fp32, bf16 and fp16 (with dynamic loss scaling)",
          group=lambda b: words(b)[1] if len(words(b)) > 1 else "model", setting=lambda b: words(b)[-1],
          columns=MEMORY_COLUMNS + [("parameters_peak_bytes", "parameters", "bytes"),
                                    ("gradients_peak_bytes", "gradients", "bytes"),
                                    ("optimizer_state_peak_bytes", "optimizer state", "bytes"),
                                    ("activations_peak_bytes", "activations peak", "bytes"),
                                    ("tokens_per_s", "tokens/s", "rate")]),
    Suite("flash_attention", "Flash attention", "bench_flash_attention",
          "naive (materialized T x T) against flash attention, per sequence length",
          group=_attention_group, setting=lambda b: words(b)[1],
          columns=[("saved_bytes", "saved for backward", "bytes"), ("workspace_bytes", "workspace", "bytes"),
                   ("TFLOP/s", "TFLOP/s", "number")]),
    Suite("lazy_loading", "Lazy data loading", "bench_lazy_loading",
          "the dataset on the device (eager) or on the host with prefetched batches (lazy)",
          group=_lazy_group, setting=_lazy_setting,
          columns=MEMORY_COLUMNS + [("data_peak_bytes", "data peak", "bytes"),
                                    ("tokens_per_s", "tokens/s", "rate")]),
    Suite("allocator_ops", "Allocator operations", "bench_allocator_ops",
          "one alloc+free with the caching allocator against asking the device (raw)",
          group=lambda b: " ".join([_plain(words(b)[0])] + words(b)[2:]),
          setting=lambda b: words(b)[1] if len(words(b)) > 1 else b.label,
          columns=[("device_allocs_per_iter", "device allocs / iter", "number"),
                   ("peak_reserved_bytes", "peak reserved", "bytes")]),
    # BM_Zero/<model>/N<ranks>/zero<stage>/offload_<what>, one file per world size (mpirun -np N).
    Suite("zero", "ZeRO", "bench_zero", "per-rank memory vs ZeRO stage, world size and offload",
          group=lambda b: " ".join(b.name.split("/")[1:3]), setting=lambda b: " ".join(b.name.split("/")[3:]),
          columns=[("parameters_bytes", "parameters", "bytes"), ("gradients_bytes", "gradients", "bytes"),
                   ("optimizer_state_bytes", "optimizer state", "bytes"),
                   ("communication_peak_bytes", "communication peak", "bytes"),
                   ("comm_volume_bytes_per_step", "sent / step", "bytes")] + MEMORY_COLUMNS),
    # BM_Fsdp/<model>/<mode>/<unit>/<prefetch|no_prefetch>; the world size is a counter.
    Suite("fsdp", "FSDP", "bench_fsdp", "per-unit sharding, unit size and prefetch",
          group=lambda b: f"{b.name.split('/')[1]} N={int(b.counter('world_size', 1))}",
          setting=lambda b: " ".join(b.name.split("/")[2:]),
          columns=MEMORY_COLUMNS + [("parameters_peak_bytes", "parameters peak", "bytes"),
                                    ("gathered_units_at_peak", "gathered units at peak", "number"),
                                    ("comm_volume_bytes_per_step", "sent / step", "bytes")]),
    Suite("allocator", "Allocator policies", "bench_allocator",
          "alloc cost (hit, miss, raw), empty_cache policies, reserved growth, fragmentation and the OOM point"),
]


def suite_for(bench: str) -> Suite:
    """The catalog entry of a benchmark file, or a generic one for a file the catalog lacks."""
    for s in SUITES:
        if s.bench == bench:
            return s
    return Suite(bench, bench, bench, "(not in the report's catalog: generic table)")


def safe_split(suite: Suite, b: Benchmark) -> tuple[str, str]:
    """(group, setting), falling back to the generic split for a name the suite did not expect."""
    try:
        return suite.group(b), suite.setting(b)
    except (IndexError, KeyError, ValueError):
        return generic_group(b), generic_setting(b)
