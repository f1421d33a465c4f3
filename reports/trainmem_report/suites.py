"""How the report presents each suite: which benchmark file each writes, how a benchmark's
name splits into a *group* (the model or shape being measured) and a *setting* (the technique
or option being compared within the group), and which counters its table shows.

Which suites there are, and in what order, is the build's catalog (build/<preset>/suites.json, made
from the suites' manifests; ci/suite copies it into the results folder): `suites_of(folder)`. A
benchmark of the catalog without a presentation here gets the generic one, titled after its
technique and pointing to its README; so does a file of the folder the catalog lacks, with a line
saying so. A folder without suites.json (written before the catalog existed) is shown in the order
of PRESENTATIONS. Every benchmark binary of this build has a presentation (reports/tests/test_catalog.py
checks it on every results folder).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .document import fmt_size
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
    explain: str = ""               # the technique and its formula, where the suite's page gives them
    group: Callable[[Benchmark], str] = generic_group
    setting: Callable[[Benchmark], str] = generic_setting
    columns: list = field(default_factory=lambda: list(MEMORY_COLUMNS))
    rank_by_time: bool = True       # compare the ranking of settings by time between devices
    # Further tables after the main one, for benchmark families with counters of their own:
    # (title, name prefix of the family, columns).
    details: list = field(default_factory=list)

    def paragraphs(self) -> list[str]:
        """What the suite's section says before its tables."""
        return [self.what] + ([self.explain] if self.explain else [])


def _attention_group(b: Benchmark) -> str:
    a = args(b)
    return f"{words(b)[2]} T={a.get('T')} D={a.get('D')} causal={a.get('causal')}"


def _lazy_setting(b: Benchmark) -> str:
    return b.label.split()[-1] if b.label else generic_setting(b)


def _lazy_group(b: Benchmark) -> str:
    w = words(b)
    return "training step " + w[1] if w[0] == "BM_Train" and len(w) > 1 else "loader only"


# bench_allocator's names (suites/allocator/bench_allocator.cpp):
#   BM_AllocFree/<hit|miss>/<fixed|expandable>[/touch]/<bytes>, BM_AllocFree/raw[/touch]/<bytes>
#   BM_LayerPattern/<fixed|expandable|raw>
#   BM_TrainEmptyCache/<fixed|expandable>/<never|every-step|every:N>
#   BM_ReservedGrowth/<no_leak|leak|growing_sequence>
#   BM_GrowingSequence/<fixed|max_split_size_mb:20|expandable>, BM_GrowingWithKeptTensors/<same>
# The settings hold ':' (every:4, max_split_size_mb:20), so the names are split on '/' only.
def _allocator_group(b: Benchmark) -> str:
    parts = b.name.split("/")
    if parts[0] == "BM_AllocFree":
        return f"AllocFree {fmt_size(float(parts[-1]))}" + (" pages touched" if "touch" in parts else "")
    if parts[0] == "BM_TrainEmptyCache":
        return f"TrainEmptyCache {parts[1]}"
    return _plain(parts[0])


def _allocator_setting(b: Benchmark) -> str:
    parts = b.name.split("/")
    if parts[0] == "BM_AllocFree":
        return "/".join(p for p in parts[1:-1] if p != "touch")
    return parts[-1]


def _measured_and_formula(counters: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """Byte columns in pairs: each measured counter, then its prediction (`predicted_<counter>`)."""
    columns = []
    for key, header in counters:
        columns += [(key, header, "exact_bytes"), (f"predicted_{key}", f"{header} (formula)", "exact_bytes")]
    return columns


ALLOCATOR_DETAILS = [
    ("empty_cache policies in a training step", "BM_TrainEmptyCache/",
     [("peak_reserved_bytes", "peak reserved", "bytes"),
      ("reserved_at_step_end_bytes", "reserved at step end", "bytes"),
      ("device_allocs_per_step", "device allocs / step", "number"),
      ("device_frees_per_step", "device frees / step", "number"),
      ("host_page_faults_per_step", "host page faults / step", "number")]),
    ("Reserved memory over 20 steps (from step 3)", "BM_ReservedGrowth/",
     [("reserved_step3_bytes", "reserved at step 3", "bytes"), ("reserved_last_bytes", "reserved at step 20", "bytes"),
      ("reserved_growth_bytes", "reserved growth", "bytes"),
      ("allocated_at_step_end_growth_bytes", "allocated-at-step-end growth", "bytes")]),
    ("Growing sequence length on a 128 MiB budget, until out of memory", "BM_GrowingSequence/",
     [("last_seq_trained", "last T trained", "number"), ("oom_at_seq", "OOM at T", "number"),
      ("peak_allocated_bytes", "peak allocated", "bytes"), ("peak_reserved_bytes", "peak reserved", "bytes"),
      ("reserved_over_allocated_at_peak", "peak reserved / peak allocated", "number"),
      ("inactive_split_peak_bytes", "peak inactive split", "bytes"),
      ("num_device_alloc", "device allocs", "number"), ("num_device_free", "device frees", "number"),
      ("num_alloc_retries", "retries", "number")]),
    ("A growing activation and a kept 2 MiB tensor per step on a 256 MiB card, until out of memory",
     "BM_GrowingWithKeptTensors/",
     [("steps_before_oom", "steps before OOM", "number"), ("largest_activation_bytes", "largest activation", "bytes"),
      ("allocated_at_oom_bytes", "allocated at OOM", "bytes"), ("reserved_at_oom_bytes", "reserved at OOM", "bytes"),
      ("inactive_split_at_oom_bytes", "inactive split at OOM", "bytes"), ("num_alloc_retries", "retries", "number")]),
]


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
    # BM_Grads/<model>/<mode>, one case per way of holding the gradients (persistent, on-demand, and
    # whatever mode the benchmark adds, e.g. in-backward); the label names the batch: "small B=4 grads=...".
    Suite("gradient_memory", "Gradient memory", "bench_gradient_memory",
          "how long a gradient lives, per mode: peak, bytes held between steps, step time",
          group=lambda b: b.label.split(" grads=")[0] if " grads=" in b.label else words(b)[1],
          setting=lambda b: words(b)[-1],
          columns=MEMORY_COLUMNS + [("gradients_peak_bytes", "gradients peak", "bytes"),
                                    ("held_between_steps_bytes", "held between steps", "bytes"),
                                    ("tokens_per_s", "tokens/s", "rate")],
          explain="persistent: the gradients are allocated with the model and zeroed after each step "
                  "(PyTorch's zero_grad(set_to_none=False)), G bytes at every moment. on-demand: each gradient "
                  "is made, zeroed, at its first write in the backward and freed after the optimizer step "
                  "(set_to_none=True): nothing between steps, and at a moment in the backward only the "
                  "gradients written so far; while the peak stays at the LM head's backward (which writes the "
                  "tied wte's gradient first), peak = persistent's peak - G + round(wte's gradient). "
                  "in-backward (--optimizer-in-backward): each parameter's AdamW update runs as soon as its "
                  "gradient is complete and frees it, so at most the root's and one layer's gradients exist "
                  "together. G is the gradients' bytes: 4 per parameter in fp32, 2 in bf16/fp16, each tensor "
                  "rounded to 512 bytes (persistent's gradients peak). Proofs and figures: suites/gradient_memory/README.md."),
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
    # BM_Zero/<model>/N<ranks>/zero<stage>/offload_<what>, one file per world size (mpirun -np N).
    # Categories as common/sharding/sharding_engine.h says: a gathered unit is parameters, a gradient
    # bucket gradients (their peaks); communication peak is buffers that only move bytes (0).
    Suite("zero", "ZeRO", "bench_zero", "per-rank memory vs ZeRO stage, world size and offload",
          group=lambda b: " ".join(b.name.split("/")[1:3]), setting=lambda b: " ".join(b.name.split("/")[3:]),
          columns=[("parameters_bytes", "parameters", "bytes"), ("gradients_bytes", "gradients", "bytes"),
                   ("optimizer_state_bytes", "optimizer state", "bytes"),
                   ("parameters_peak_bytes", "parameters peak", "bytes"),
                   ("gradients_peak_bytes", "gradients peak", "bytes"),
                   ("communication_peak_bytes", "communication peak", "bytes"),
                   ("host_bytes", "host (offload)", "bytes"),
                   ("comm_volume_bytes_per_step", "comm volume / step", "bytes")] + MEMORY_COLUMNS,
          details=[("Measured against this implementation's exact formula (suites/zero/zero_memory.h)", "BM_Zero/",
                    _measured_and_formula([("parameters_bytes", "parameters"), ("gradients_bytes", "gradients"),
                                           ("optimizer_state_bytes", "optimizer state"),
                                           ("parameters_peak_bytes", "parameters peak"),
                                           ("gradients_peak_bytes", "gradients peak"),
                                           ("communication_peak_bytes", "communication peak"),
                                           ("host_bytes", "host"), ("comm_volume_bytes_per_step", "comm volume / step")]))]),
    # BM_Fsdp/<model>/<mode>/<unit>/<prefetch|no_prefetch>; the world size is a counter.
    Suite("fsdp", "FSDP", "bench_fsdp", "per-unit sharding, unit size and prefetch",
          group=lambda b: f"{b.name.split('/')[1]} N={int(b.counter('world_size', 1))}",
          setting=lambda b: " ".join(b.name.split("/")[2:]),
          columns=MEMORY_COLUMNS + [("parameters_peak_bytes", "parameters peak", "bytes"),
                                    ("gradients_peak_bytes", "gradients peak", "bytes"),
                                    ("gathered_units_at_peak", "gathered units at peak", "number"),
                                    ("comm_volume_bytes_per_step", "comm volume / step", "bytes")],
          details=[("Peaks against the formula P_s + F_root + gathered layer units (suites/fsdp/fsdp_memory.h)",
                    "BM_Fsdp/",
                    _measured_and_formula([("parameters_peak_bytes", "parameters peak"),
                                           ("gradients_peak_bytes", "gradients peak")]) +
                    [("gathered_units_at_peak", "layer units gathered at peak", "number")])]),
    Suite("allocator", "The caching allocator", "bench_allocator",
          "alloc+free on a cache hit, a miss and raw; empty_cache policies in training; reserved growth with "
          "and without a leak; growing workloads until OOM with fixed segments, max_split_size and expandable "
          "segments",
          group=_allocator_group, setting=_allocator_setting,
          columns=[("device_allocs_per_iter", "device allocs / iter", "number"),
                   ("device_allocs_per_step", "device allocs / step", "number")] + MEMORY_COLUMNS,
          details=ALLOCATOR_DETAILS),
    # all_reduce/<dtype>/<bytes>, one file per world size (mpirun -np N); nccl-tests' columns.
    Suite("collectives", "Collectives (the communicator)", "bench_collectives",
          "all-reduce, reduce-scatter, all-gather and broadcast per buffer size, nccl-tests' bus bandwidth",
          group=lambda b: f"{' '.join(b.name.split('/')[:2])} N={int(b.counter('ranks', 1))}",
          setting=lambda b: fmt_size(float(b.name.split("/")[2])),
          columns=[("busbw", "bus bandwidth", "bandwidth"), ("algbw", "algorithm bandwidth", "bandwidth"),
                   ("wrong", "#wrong", "number")],
          rank_by_time=False),
]


# bench_estimator (suites/trainmem/estimator/bench_estimator.cpp): BM_MetaRun/<model>,
# BM_Estimate/<model>, BM_MetaRunSharded/<zero3|fsdp_full>/<ranks>: how long an estimate takes.
def _estimator_group(b: Benchmark) -> str:
    parts = b.name.split("/")
    return f"{_plain(parts[0])} {parts[1]}" if parts[0] == "BM_MetaRunSharded" else _plain(parts[0])


def _estimator_setting(b: Benchmark) -> str:
    parts = b.name.split("/")
    return f"N={parts[2]}" if parts[0] == "BM_MetaRunSharded" and len(parts) > 2 else parts[1]


# bench_blas_threads (kernels/bench/bench_blas_threads.cpp): BM_Linear/<model>/<N>x<C>x<OC>/blas_threads:<1|all>.
def _blas_group(b: Benchmark) -> str:
    return " ".join(words(b)[1:3])


def _blas_setting(b: Benchmark) -> str:
    return f"blas_threads:{args(b).get('blas_threads', '?')}"


SUITES += [
    Suite("estimator", "The estimator (meta runs)", "bench_estimator",
          "how long an estimate takes: the meta run per model, `trainmem estimate`, and rank 0's sharded meta run "
          "per world size (no memory or kernels: the time is the estimator's own)",
          group=_estimator_group, setting=_estimator_setting,
          columns=[("parameters", "parameters", "number"), ("peak_allocated", "peak allocated (estimated)", "bytes"),
                   ("peak_reserved", "peak reserved (estimated)", "bytes"), ("allocations", "allocations", "number"),
                   ("max_batch", "largest micro-batch", "number")],
          rank_by_time=False),
    Suite("blas_threads", "CPU linear layer: one BLAS thread or all", "bench_blas_threads",
          "the fp32 linear layer (forward and backward) at the products of the models trainmem trains, on one "
          "OpenBLAS thread and on all of them: where a second thread starts to pay (kernels/cpu/blas_threads.h)",
          group=_blas_group, setting=_blas_setting,
          columns=[("mnk", "N·C·OC", "number"), ("blas_threads", "threads", "number")]),
]


PRESENTATIONS = SUITES  # the presentations, by benchmark file (the order of a folder without suites.json)


def catalog_suite(entry: dict) -> Suite:
    """The suite of one entry of the build's catalog: its presentation, or the generic one."""
    bench = entry["name"]
    for s in PRESENTATIONS:
        if s.bench == bench:
            return s
    technique = entry.get("technique") if isinstance(entry.get("technique"), str) else None
    readme = f"{entry['folder']}/README.md" if isinstance(entry.get("folder"), str) else "its folder"
    what = (f"the technique {technique}'s benchmark" if technique else "a benchmark of the build") + \
        f" (generic table: the report has no presentation of its own for it; see {readme})"
    return Suite(technique or bench, technique or bench, bench, what)


def suites_of(folder) -> list[Suite]:
    """The suites of a results folder, in the order they ran: its catalog's (suites.json), else PRESENTATIONS'."""
    if not folder.catalog:
        return list(PRESENTATIONS)
    return [catalog_suite(entry) for entry in folder.catalog]


def has_entry(bench: str) -> bool:
    """Whether the catalog knows the benchmark file `bench` (not the generic fallback)."""
    return any(s.bench == bench for s in SUITES)


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
