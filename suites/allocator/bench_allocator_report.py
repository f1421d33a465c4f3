"""How the report (reports/trainmem_report) presents bench_allocator: the caching allocator's cost,
its empty_cache policies, reserved growth and the growing workloads run until out of memory, and the
claims it tests."""
from __future__ import annotations

import pathlib

from reports.trainmem_report import plots
from reports.trainmem_report.claims import Claim, all_hold, claim, noise_note, pct, table, verdict
from reports.trainmem_report.document import MiB, Figure, fmt_bytes, fmt_ms, fmt_percent, fmt_size
from reports.trainmem_report.noise import is_less
from reports.trainmem_report.presentation import MEMORY_COLUMNS, Suite, plain
from reports.trainmem_report.report import slug
from reports.trainmem_report.results import Benchmark, ResultFolder
from reports.trainmem_report.result_schema import PEAK_ALLOCATED, PEAK_RESERVED


# bench_allocator's names (bench_allocator.cpp):
#   BM_AllocFree/<hit|miss>/<fixed|expandable>[/touch]/<bytes>, BM_AllocFree/raw[/touch]/<bytes>
#   BM_LayerPattern/<fixed|expandable|raw>
#   BM_TrainEmptyCache/<fixed|expandable>/<never|every-step|every:N>
#   BM_ReservedGrowth/<no_leak|leak|growing_sequence>
#   BM_GrowingSequence/<fixed|max_split_size_mb:20|expandable>, BM_GrowingWithKeptTensors/<same>
# The settings hold ':' (every:4, max_split_size_mb:20), so the names are split on '/' only.
def _group(b: Benchmark) -> str:
    parts = b.name.split("/")
    if parts[0] == "BM_AllocFree":
        return f"AllocFree {fmt_size(float(parts[-1]))}" + (" pages touched" if "touch" in parts else "")
    if parts[0] == "BM_TrainEmptyCache":
        return f"TrainEmptyCache {parts[1]}"
    return plain(parts[0])


def _setting(b: Benchmark) -> str:
    parts = b.name.split("/")
    if parts[0] == "BM_AllocFree":
        return "/".join(p for p in parts[1:-1] if p != "touch")
    return parts[-1]


DETAILS = [
    ("empty_cache policies in a training step", "BM_TrainEmptyCache/",
     [(PEAK_RESERVED, "peak reserved", "bytes"),
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
      (PEAK_ALLOCATED, "peak allocated", "bytes"), (PEAK_RESERVED, "peak reserved", "bytes"),
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


def allocator_figures(folder: ResultFolder, suite: Suite, out: pathlib.Path) -> list[Figure]:
    """The cost of one alloc+free against the block size per mode, and the growing workloads'
    allocated vs reserved bytes per allocator configuration."""
    figures = []
    cost: dict[str, list[tuple[float, float]]] = {}
    for b in folder.runs(suite.bench):
        parts = b.name.split("/")
        if parts[0] == "BM_AllocFree" and "touch" not in parts:
            cost.setdefault("/".join(parts[1:-1]), []).append((float(parts[-1]), b.real_time_ms * 1e3))
    if cost:
        figures.append(Figure(plots.lines(cost, "alloc + free of one block", "block size", "µs",
                                          out / "allocator-alloc-cost.png", logx=True, logy=True,
                                          xtick_label=fmt_size),
                              "Time of one allocate + free: from the cache (hit), after empty_cache (miss: a new "
                              "segment or pages), and raw (one device allocation per request)."))
    for family, counters, title in (
            ("GrowingSequence", (PEAK_ALLOCATED, PEAK_RESERVED),
             "growing sequence until OOM (128 MiB)"),
            ("GrowingWithKeptTensors", ("allocated_at_oom_bytes", "reserved_at_oom_bytes"),
             "growing activation + kept tensors until OOM (256 MiB)"),
            ("ReservedGrowth", ("allocated_at_step_end_growth_bytes", "reserved_growth_bytes"),
             "growth from step 3 to step 20")):
        runs = [(suite.setting(b), b) for b in folder.runs(suite.bench) if b.name.startswith(f"BM_{family}/")]
        if runs:
            values = {key.replace("_bytes", "").replace("_", " "): [b.counter(key, 0) / MiB for _, b in runs]
                      for key in counters}
            path = plots.grouped_bars([s for s, _ in runs], values, f"allocator: {title}", "MiB",
                                      out / f"allocator-{slug(family)}.png")
            figures.append(Figure(path, f"Allocator, {title}: allocated and reserved bytes per configuration."))
    return figures


SUITE = Suite(
    "allocator", "The caching allocator", "bench_allocator",
    "alloc+free on a cache hit, a miss and raw; empty_cache policies in training; reserved growth with "
    "and without a leak; growing workloads until OOM with fixed segments, max_split_size and expandable "
    "segments",
    group=_group, setting=_setting,
    columns=[("device_allocs_per_iter", "device allocs / iter", "number"),
             ("device_allocs_per_step", "device allocs / step", "number")] + MEMORY_COLUMNS,
    details=DETAILS,
    order=10, technique_order=7,
    figures=allocator_figures,
    summary_baseline="never")


@claim("Caching exists because asking the device (the driver) for memory is slow", SUITE,
       "alloc+free of one block: a cache hit at least 2x faster than raw mode (one device allocation and "
       "one device free per request) at every block size")
def caching_beats_device(f: ResultFolder, c: Claim) -> None:
    # Groups "AllocFree <size>" (the memory untouched: the allocator's own cost) and
    # "AllocFree <size> pages touched" (the pages also written once, as a kernel would).
    parts, touched, oks = [], [], []
    for group, runs in table(f, SUITE).items():
        if group.startswith("AllocFree") and "hit/fixed" in runs and "raw" in runs:
            speedup = runs["raw"].real_time_ms / runs["hit/fixed"].real_time_ms
            size = group[len("AllocFree "):]
            if group.endswith("pages touched"):
                touched.append(f"{size.replace(' pages touched', '')} x{speedup:.1f}")
                continue
            c.numbers[f"{size} raw / hit"] = speedup
            ok = is_less(runs["hit/fixed"], runs["raw"], 0.5)
            oks.append(ok)
            parts.append(f"{size} x{speedup:.1f} ({fmt_ms(runs['hit/fixed'].real_time_ms)} vs "
                         f"{fmt_ms(runs['raw'].real_time_ms)}){noise_note(ok, runs['hit/fixed'], runs['raw'])}")
    if oks:
        c.verdict = verdict(all_hold(oks))
        c.measured = "raw / cache hit: " + ", ".join(parts)
        if touched:
            c.measured += "; with the pages written once: " + ", ".join(touched)


def _reserved_over_allocated(b: Benchmark) -> float:
    return b.counter(PEAK_RESERVED) / b.counter(PEAK_ALLOCATED)


@claim("Calling empty_cache() every step is cheap and reduces fragmentation", SUITE,
       "training step, every-step vs never (fixed and expandable segments): step time at most 5% longer, "
       "and peak reserved / peak allocated lower")
def empty_cache_is_cheap(f: ResultFolder, c: Claim) -> None:
    # Groups "TrainEmptyCache <fixed|expandable>", settings never / every-step / every:N.
    parts, oks = [], []
    for group, runs in table(f, SUITE).items():
        if group.startswith("TrainEmptyCache") and "never" in runs and "every-step" in runs:
            never, every = runs["never"], runs["every-step"]
            segments = group.split()[-1]
            overhead = pct(every.real_time_ms, never.real_time_ms)
            c.numbers[f"{segments} time change %"] = overhead
            c.numbers[f"{segments} reserved/allocated never"] = _reserved_over_allocated(never)
            c.numbers[f"{segments} reserved/allocated every step"] = _reserved_over_allocated(every)
            time_ok = is_less(every, never, 1.05)
            oks.append(all_hold([_reserved_over_allocated(every) < _reserved_over_allocated(never), time_ok]))
            text = (f"{segments}: time {fmt_percent(overhead)}{noise_note(time_ok, every, never)}, peak reserved {fmt_bytes(every.counter(PEAK_RESERVED))} "
                    f"vs {fmt_bytes(never.counter(PEAK_RESERVED))} (reserved / allocated "
                    f"{_reserved_over_allocated(every):.3f} vs {_reserved_over_allocated(never):.3f})")
            if every.counter("reserved_at_step_end_bytes") is not None:
                text += (f"; between steps {fmt_bytes(every.counter('reserved_at_step_end_bytes'))} vs "
                         f"{fmt_bytes(never.counter('reserved_at_step_end_bytes'))}")
            if every.counter("device_allocs_per_step") is not None:
                text += f", {every.counter('device_allocs_per_step'):.0f} device allocations per step vs " \
                        f"{never.counter('device_allocs_per_step'):.0f}"
            parts.append(text)
    if oks:
        c.verdict, c.measured = verdict(all_hold(oks)), "; ".join(parts)
    elif f.runs(SUITE.bench):
        c.measured = f"{SUITE.bench}.json has no TrainEmptyCache never / every-step pair"


# The two workloads that fragment, run until out of memory: (benchmark family, how far it got,
# reserved/allocated at the decisive moment).
GROWING = {
    "GrowingSequence": ("last_seq_trained", "last T trained",
                        lambda b: b.counter("reserved_over_allocated_at_peak")),
    "GrowingWithKeptTensors": ("steps_before_oom", "steps before OOM",
                               lambda b: b.counter("reserved_at_oom_bytes") / b.counter("allocated_at_oom_bytes")),
}


@claim("Expandable segments reduce fragmentation", SUITE,
       "both growing workloads (sequence length +64 per step on 128 MiB; a growing activation and a kept tensor "
       "per step on 256 MiB): reserved / allocated lower with expandable segments than with fixed segments")
def expandable_segments_reduce_fragmentation(f: ResultFolder, c: Claim) -> None:
    parts, oks = [], []
    for group, (_, _, ratio) in GROWING.items():
        runs = table(f, SUITE).get(group, {})
        if "fixed" in runs and "expandable" in runs:
            fixed, expandable = ratio(runs["fixed"]), ratio(runs["expandable"])
            c.numbers[f"{group} fixed"], c.numbers[f"{group} expandable"] = fixed, expandable
            oks.append(expandable < fixed)
            parts.append(f"{group}: reserved / allocated {expandable:.3f} (expandable) vs {fixed:.3f} (fixed)"
                         + (f", {ratio(runs['max_split_size_mb:20']):.3f} (max_split_size_mb:20)"
                            if "max_split_size_mb:20" in runs else ""))
    if oks:
        c.verdict, c.measured = verdict(all(oks)), "; ".join(parts)


@claim("Expandable segments let a growing workload go further before out of memory", SUITE,
       "both growing workloads: expandable segments train a longer sequence / more steps before OOM than "
       "fixed segments")
def expandable_segments_move_the_oom_point(f: ResultFolder, c: Claim) -> None:
    parts, oks = [], []
    for group, (counter, what, _) in GROWING.items():
        runs = table(f, SUITE).get(group, {})
        if "fixed" in runs and "expandable" in runs:
            reach = {setting: b.counter(counter) for setting, b in runs.items()}
            c.numbers[f"{group} fixed"], c.numbers[f"{group} expandable"] = reach["fixed"], reach["expandable"]
            oks.append(reach["expandable"] > reach["fixed"])
            parts.append(f"{group}, {what}: " + ", ".join(f"{s} {v:.0f}" for s, v in reach.items()))
    if oks:
        c.verdict, c.measured = verdict(all(oks)), "; ".join(parts)


@claim("Reserved memory that keeps growing means a leak", SUITE,
       "20 training steps: reserved memory grows (step 3 to 20) only in the run that keeps a tensor every step, "
       "not in the runs that leak nothing (fixed and growing sequence length)")
def growing_reserved_means_a_leak(f: ResultFolder, c: Claim) -> None:
    runs = table(f, SUITE).get("ReservedGrowth", {})
    if "leak" not in runs or len(runs) < 2:
        return
    growth = {s: b.counter("reserved_growth_bytes") for s, b in runs.items()}
    kept = {s: b.counter("allocated_at_step_end_growth_bytes") for s, b in runs.items()}
    c.numbers.update({f"{s} reserved growth": g for s, g in growth.items()})
    # The claim, as a rule: reserved grows => something leaks. A run without a leak whose reserved
    # memory grows contradicts it.
    c.verdict = verdict(all(g <= 0 for s, g in growth.items() if s != "leak"))
    change = lambda x: "flat" if x == 0 else f"{'+' if x > 0 else ''}{fmt_bytes(x)}"
    c.measured = "; ".join(f"{s}: reserved {change(g)}, allocated at step end {change(kept[s])}"
                           for s, g in growth.items())
