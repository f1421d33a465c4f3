"""The guides' claims (DESIGN.md, "The claims to test"), each checked against the measured
numbers of one results folder. A verdict is computed from the numbers by the criterion written
next to it: "holds", "does not hold", "not measured" when the results it needs are absent, "not
resolved at this noise" when a time difference the criterion turns on is within the spread of the
repetitions (noise.py states the rule), and "not measurable on CPU" for a claim about hardware the
CPU backend does not have (pinned host memory, 16-bit tensor cores): its numbers are shown, no
verdict drawn. Nothing here knows the answer in advance.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .document import fmt_bytes, fmt_ms, fmt_percent
from .noise import NOT_RESOLVED, is_less, why_unresolved
from .results import Benchmark, ResultFolder
from .suites import args, safe_split, suite_for

HOLDS, FAILS, NOT_MEASURED = "holds", "does not hold", "not measured"
NOT_MEASURABLE_ON_CPU = "not measurable on CPU"


@dataclass
class Claim:
    claim: str
    suite: str
    criterion: str
    verdict: str = NOT_MEASURED
    measured: str = ""
    numbers: dict[str, float] = field(default_factory=dict)


CLAIMS = []  # the checks, in the order the report lists them


def claim(text: str, suite: str, criterion: str):
    """Registers a check: `check(folder, c)` fills in the Claim `c` from the folder's numbers (or
    leaves it "not measured"). Malformed numbers make it "not measured" with the reason."""
    def register(check):
        def run(folder: ResultFolder) -> Claim:
            c = Claim(text, suite, criterion)
            try:
                check(folder, c)
            except (TypeError, ValueError, ArithmeticError, KeyError, IndexError, AttributeError) as e:
                c.verdict, c.numbers = NOT_MEASURED, {}
                c.measured = f"results malformed: {type(e).__name__}: {e}"
            return c
        run.__name__ = check.__name__
        CLAIMS.append(run)
        return run
    return register


def table(folder: ResultFolder, bench: str) -> dict[str, dict[str, Benchmark]]:
    """group -> setting -> benchmark, as the suite catalog splits the names."""
    suite = suite_for(bench)
    out: dict[str, dict[str, Benchmark]] = {}
    for b in folder.runs(bench):
        group, setting = safe_split(suite, b)
        out.setdefault(group, {})[setting] = b
    return out


def _verdict(ok: bool | None) -> str:
    """True: holds; False: does not hold; None: a time difference it needs is within the noise."""
    return NOT_RESOLVED if ok is None else (HOLDS if ok else FAILS)


def _all(oks: list[bool | None]) -> bool | None:
    """Every part must hold: one that fails fails the claim, else one not resolved leaves it unresolved."""
    if any(ok is False for ok in oks):
        return False
    return None if any(ok is None for ok in oks) else True


def _noise_note(ok: bool | None, *cases: Benchmark) -> str:
    """" (not resolved at this noise: why)" after a comparison that is not resolved, else ""."""
    return f" ({why_unresolved(*cases)})" if ok is None else ""


def _on_cpu(f: ResultFolder) -> bool:
    return f.device.get("kind") == "cpu"


def _pct(a: float, b: float) -> float:
    """How much larger a is than b, in percent."""
    return 100.0 * (a / b - 1.0)


@claim("Activation checkpointing saves 30-50% of memory for 20-30% more time", "checkpointing",
       "full recompute vs none, every depth: peak allocated at least 30% lower, step time at most 30% longer")
def checkpointing_saves_30_50(f: ResultFolder, c: Claim) -> None:
    parts, oks = [], []
    for group, runs in table(f, "bench_checkpointing").items():
        if "none" in runs and "full" in runs:
            none, full = runs["none"], runs["full"]
            saving = -_pct(full.counter("peak_allocated_bytes"), none.counter("peak_allocated_bytes"))
            overhead = _pct(full.real_time_ms, none.real_time_ms)
            c.numbers[f"{group} saving %"], c.numbers[f"{group} overhead %"] = saving, overhead
            time_ok = is_less(full, none, 1.30)
            oks.append(_all([saving >= 30, time_ok]))
            parts.append(f"{group}: memory -{saving:.1f}%, time {fmt_percent(overhead)}{_noise_note(time_ok, full, none)}")
    if oks:
        c.verdict, c.measured = _verdict(_all(oks)), "; ".join(parts)


@claim("sqrt(L) checkpointing: less activation memory for about one extra forward pass (+33% time)",
       "checkpointing", "sqrt vs none, every depth: activation peak lower, step time at most 50% longer")
def sqrt_checkpointing(f: ResultFolder, c: Claim) -> None:
    parts, oks = [], []
    for group, runs in table(f, "bench_checkpointing").items():
        if "none" in runs and "sqrt" in runs:
            none, sq = runs["none"], runs["sqrt"]
            saving = -_pct(sq.counter("activations_peak_bytes"), none.counter("activations_peak_bytes"))
            overhead = _pct(sq.real_time_ms, none.real_time_ms)
            c.numbers[f"{group} activation saving %"], c.numbers[f"{group} overhead %"] = saving, overhead
            time_ok = is_less(sq, none, 1.50)
            oks.append(_all([saving > 0, time_ok]))
            parts.append(f"{group}: activations -{saving:.1f}%, time {fmt_percent(overhead)}{_noise_note(time_ok, sq, none)}")
    if oks:
        c.verdict, c.measured = _verdict(_all(oks)), "; ".join(parts)


@claim("Mixed-precision Adam needs 16 bytes per parameter (2 + 2 + 12)", "mixed_precision",
       "bf16: (parameters + gradients + optimizer state) / parameters within 16 +- 0.5, "
       "the parameter count taken as the fp32 parameter bytes / 4")
def sixteen_bytes_per_parameter(f: ResultFolder, c: Claim) -> None:
    for group, runs in table(f, "bench_mixed_precision").items():
        if "fp32" in runs and "bf16" in runs:
            psi = runs["fp32"].counter("parameters_peak_bytes", 0) / 4
            b = runs["bf16"]
            states = sum(b.counter(k, 0) for k in ("parameters_peak_bytes", "gradients_peak_bytes",
                                                   "optimizer_state_peak_bytes"))
            if psi:
                per = states / psi
                c.numbers["bytes per parameter"] = per
                c.verdict = _verdict(abs(per - 16) <= 0.5)
                c.measured = f"{group}: {fmt_bytes(states)} for {psi:,.0f} parameters = {per:.2f} B/parameter"
            break


@claim("bf16 halves activation memory", "mixed_precision",
       "activation peak bf16 / fp32 at most 0.55")
def bf16_halves_activations(f: ResultFolder, c: Claim) -> None:
    for group, runs in table(f, "bench_mixed_precision").items():
        if "fp32" in runs and "bf16" in runs:
            ratio = runs["bf16"].counter("activations_peak_bytes") / runs["fp32"].counter("activations_peak_bytes")
            c.numbers["ratio"] = ratio
            c.verdict = _verdict(ratio <= 0.55)
            c.measured = (f"{group}: {fmt_bytes(runs['bf16'].counter('activations_peak_bytes'))} vs "
                          f"{fmt_bytes(runs['fp32'].counter('activations_peak_bytes'))} (x{ratio:.3f})")
            break


@claim("Mixed precision makes training faster", "mixed_precision",
       "bf16 step time shorter than fp32 on this device (a GPU's 16-bit tensor cores; the CPU backend "
       "converts in software, so on the CPU it is not measurable)")
def mixed_precision_is_faster(f: ResultFolder, c: Claim) -> None:
    for group, runs in table(f, "bench_mixed_precision").items():
        if "fp32" in runs and "bf16" in runs:
            bf16, fp32 = runs["bf16"], runs["fp32"]
            change = _pct(bf16.real_time_ms, fp32.real_time_ms)
            c.numbers["bf16 time change %"] = change
            faster = is_less(bf16, fp32)
            c.verdict = NOT_MEASURABLE_ON_CPU if _on_cpu(f) else _verdict(faster)
            c.measured = (f"{group}: bf16 step {fmt_ms(bf16.real_time_ms)} vs fp32 {fmt_ms(fp32.real_time_ms)} "
                          f"({fmt_percent(change)}){_noise_note(faster, bf16, fp32)}")
            if _on_cpu(f):
                c.measured += " (CPU backend: no 16-bit arithmetic units to speed up)"
            break


@claim("Training in 16 bits reaches the loss of fp32", "mixed_precision",
       "trainmem train (tiny): mean loss of the last 20% of steps within 2% of fp32's, for bf16 and fp16")
def sixteen_bit_tracks_fp32(f: ResultFolder, c: Claim) -> None:
    def tail_mean(run):
        losses = [s["loss"] for s in run["steps"]]
        tail = losses[len(losses) - max(1, len(losses) // 5):]
        return sum(tail) / len(tail)
    if "precision-fp32" not in f.train_runs:
        return
    reference, parts, oks = tail_mean(f.train_runs["precision-fp32"]), [], []
    for p in ("bf16", "fp16"):
        if f"precision-{p}" in f.train_runs:
            gap = _pct(tail_mean(f.train_runs[f"precision-{p}"]), reference)
            c.numbers[f"{p} gap %"] = gap
            oks.append(abs(gap) <= 2)
            parts.append(f"{p} {fmt_percent(gap)}")
    if oks:
        steps = len(f.train_runs["precision-fp32"]["steps"])
        c.verdict = _verdict(all(oks))
        c.measured = f"final loss vs fp32 ({reference:.3f}, {steps} steps): " + ", ".join(parts)


@claim("Gradient accumulation gives a large effective batch without its memory", "accumulation",
       "same effective batch: peak allocated with the smallest micro-batch lower than with the whole batch at once")
def accumulation_lowers_peak(f: ResultFolder, c: Claim) -> None:
    for group, runs in table(f, "bench_accumulation").items():
        by_micro = sorted(runs.values(), key=lambda b: int(args(b).get("micro", 0)))
        if len(by_micro) >= 2:
            small, whole = by_micro[0], by_micro[-1]
            saving = -_pct(small.counter("peak_allocated_bytes"), whole.counter("peak_allocated_bytes"))
            overhead = _pct(small.real_time_ms, whole.real_time_ms)
            faster = is_less(small, whole)
            c.numbers["saving %"], c.numbers["overhead %"] = saving, overhead
            c.verdict = _verdict(small.counter("peak_allocated_bytes") < whole.counter("peak_allocated_bytes"))
            c.measured = (f"{group}: {suite_for('bench_accumulation').setting(small)} "
                          f"{fmt_bytes(small.counter('peak_allocated_bytes'))} vs "
                          f"{suite_for('bench_accumulation').setting(whole)} "
                          f"{fmt_bytes(whole.counter('peak_allocated_bytes'))} (-{saving:.1f}%), "
                          f"time per step {fmt_percent(overhead)}{_noise_note(faster, small, whole)}")
            break


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of log y against log x: the exponent k in y ~ x^k."""
    xs = [math.log(x) for x, _ in points]
    ys = [math.log(y) for _, y in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def attention_memory_series(f: ResultFolder) -> dict[str, list[tuple[float, float]]]:
    """Activation peak (bytes) against T from the `train-attention-<kind>-T<T>` runs."""
    series: dict[str, list[tuple[float, float]]] = {}
    for name, run in f.train_runs.items():
        m = re.fullmatch(r"attention-(\w+)-T(\d+)", name)
        if m:
            peak = run["memory"].get("by_category", {}).get("activations", {}).get("peak_bytes")
            if peak:
                series.setdefault(m.group(1), []).append((float(m.group(2)), float(peak)))
    return series


@claim("Flash attention needs O(N) memory in the sequence length (naive: O(N^2))", "flash_attention",
       "exponent k of activation peak ~ T^k (trainmem train, allocator-measured): flash k <= 1.15")
def flash_attention_linear(f: ResultFolder, c: Claim) -> None:
    series = attention_memory_series(f)
    if len(series.get("flash", [])) >= 3:
        k = _slope(series["flash"])
        c.numbers["flash exponent"] = k
        c.verdict = _verdict(k <= 1.15)
        c.measured = f"flash k = {k:.2f}"
        if len(series.get("naive", [])) >= 3:
            c.numbers["naive exponent"] = _slope(series["naive"])
            c.measured += f", naive k = {c.numbers['naive exponent']:.2f}"
        c.measured += f" over T = {', '.join(str(int(t)) for t, _ in sorted(series['flash']))}"


@claim("Keep the dataset on the host and move batches: less device memory, same speed", "lazy_loading",
       "training step: device data bytes lower with lazy than eager, tokens/s at least 90% of eager "
       "(the same tokens per step: lazy's step time at most eager's / 0.9)")
def lazy_loading_saves_device_memory(f: ResultFolder, c: Claim) -> None:
    for group, runs in table(f, "bench_lazy_loading").items():
        if group.startswith("training") and "eager" in runs and "lazy" in runs:
            eager, lazy = runs["eager"], runs["lazy"]
            speed = eager.real_time_ms / lazy.real_time_ms
            time_ok = is_less(lazy, eager, 1 / 0.9)
            c.numbers["speed ratio"] = speed
            c.verdict = _verdict(_all([lazy.counter("data_peak_bytes", 0) < eager.counter("data_peak_bytes", 0), time_ok]))
            c.measured = (f"data on device {fmt_bytes(lazy.counter('data_peak_bytes'))} (lazy) vs "
                          f"{fmt_bytes(eager.counter('data_peak_bytes'))} (eager); tokens/s x{speed:.2f}"
                          f"{_noise_note(time_ok, lazy, eager)}")


@claim("pin_memory gives faster host-to-device transfers", "lazy_loading",
       "loader only: batches/s with pinned staging at least 5% above unpinned (a GPU's host-to-device "
       "copy; on the CPU there is none, so it is not measurable)")
def pinned_memory_is_faster(f: ResultFolder, c: Claim) -> None:
    runs = table(f, "bench_lazy_loading").get("loader only", {})
    if "lazy" in runs and "lazy_unpinned" in runs:
        pinned, unpinned = runs["lazy"], runs["lazy_unpinned"]
        ratio = unpinned.real_time_ms / pinned.real_time_ms
        faster = is_less(pinned, unpinned, 1 / 1.05)
        c.numbers["speed ratio"] = ratio
        c.verdict = NOT_MEASURABLE_ON_CPU if _on_cpu(f) else _verdict(faster)
        c.measured = f"pinned / unpinned throughput x{ratio:.2f}{_noise_note(faster, pinned, unpinned)}"
        if _on_cpu(f):
            c.measured += " (CPU backend: no host-to-device copy exists to speed up)"


# --- The caching allocator (bench_allocator)

@claim("Caching exists because asking the device (the driver) for memory is slow", "allocator",
       "alloc+free of one block: a cache hit at least 2x faster than raw mode (one device allocation and "
       "one device free per request) at every block size")
def caching_beats_device(f: ResultFolder, c: Claim) -> None:
    # Groups "AllocFree <size>" (the memory untouched: the allocator's own cost) and
    # "AllocFree <size> pages touched" (the pages also written once, as a kernel would).
    parts, touched, oks = [], [], []
    for group, runs in table(f, "bench_allocator").items():
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
                         f"{fmt_ms(runs['raw'].real_time_ms)}){_noise_note(ok, runs['hit/fixed'], runs['raw'])}")
    if oks:
        c.verdict = _verdict(_all(oks))
        c.measured = "raw / cache hit: " + ", ".join(parts)
        if touched:
            c.measured += "; with the pages written once: " + ", ".join(touched)


def _reserved_over_allocated(b: Benchmark) -> float:
    return b.counter("peak_reserved_bytes") / b.counter("peak_allocated_bytes")


@claim("Calling empty_cache() every step is cheap and reduces fragmentation", "allocator",
       "training step, every-step vs never (fixed and expandable segments): step time at most 5% longer, "
       "and peak reserved / peak allocated lower")
def empty_cache_is_cheap(f: ResultFolder, c: Claim) -> None:
    # Groups "TrainEmptyCache <fixed|expandable>", settings never / every-step / every:N.
    parts, oks = [], []
    for group, runs in table(f, "bench_allocator").items():
        if group.startswith("TrainEmptyCache") and "never" in runs and "every-step" in runs:
            never, every = runs["never"], runs["every-step"]
            segments = group.split()[-1]
            overhead = _pct(every.real_time_ms, never.real_time_ms)
            c.numbers[f"{segments} time change %"] = overhead
            c.numbers[f"{segments} reserved/allocated never"] = _reserved_over_allocated(never)
            c.numbers[f"{segments} reserved/allocated every step"] = _reserved_over_allocated(every)
            time_ok = is_less(every, never, 1.05)
            oks.append(_all([_reserved_over_allocated(every) < _reserved_over_allocated(never), time_ok]))
            text = (f"{segments}: time {fmt_percent(overhead)}{_noise_note(time_ok, every, never)}, peak reserved {fmt_bytes(every.counter('peak_reserved_bytes'))} "
                    f"vs {fmt_bytes(never.counter('peak_reserved_bytes'))} (reserved / allocated "
                    f"{_reserved_over_allocated(every):.3f} vs {_reserved_over_allocated(never):.3f})")
            if every.counter("reserved_at_step_end_bytes") is not None:
                text += (f"; between steps {fmt_bytes(every.counter('reserved_at_step_end_bytes'))} vs "
                         f"{fmt_bytes(never.counter('reserved_at_step_end_bytes'))}")
            if every.counter("device_allocs_per_step") is not None:
                text += f", {every.counter('device_allocs_per_step'):.0f} device allocations per step vs " \
                        f"{never.counter('device_allocs_per_step'):.0f}"
            parts.append(text)
    if oks:
        c.verdict, c.measured = _verdict(_all(oks)), "; ".join(parts)
    elif f.runs("bench_allocator"):
        c.measured = "bench_allocator.json has no TrainEmptyCache never / every-step pair"


# The two workloads that fragment, run until out of memory: (benchmark family, how far it got,
# reserved/allocated at the decisive moment).
GROWING = {
    "GrowingSequence": ("last_seq_trained", "last T trained",
                        lambda b: b.counter("reserved_over_allocated_at_peak")),
    "GrowingWithKeptTensors": ("steps_before_oom", "steps before OOM",
                               lambda b: b.counter("reserved_at_oom_bytes") / b.counter("allocated_at_oom_bytes")),
}


@claim("Expandable segments reduce fragmentation", "allocator",
       "both growing workloads (sequence length +64 per step on 128 MiB; a growing activation and a kept tensor "
       "per step on 256 MiB): reserved / allocated lower with expandable segments than with fixed segments")
def expandable_segments_reduce_fragmentation(f: ResultFolder, c: Claim) -> None:
    parts, oks = [], []
    for group, (_, _, ratio) in GROWING.items():
        runs = table(f, "bench_allocator").get(group, {})
        if "fixed" in runs and "expandable" in runs:
            fixed, expandable = ratio(runs["fixed"]), ratio(runs["expandable"])
            c.numbers[f"{group} fixed"], c.numbers[f"{group} expandable"] = fixed, expandable
            oks.append(expandable < fixed)
            parts.append(f"{group}: reserved / allocated {expandable:.3f} (expandable) vs {fixed:.3f} (fixed)"
                         + (f", {ratio(runs['max_split_size_mb:20']):.3f} (max_split_size_mb:20)"
                            if "max_split_size_mb:20" in runs else ""))
    if oks:
        c.verdict, c.measured = _verdict(all(oks)), "; ".join(parts)


@claim("Expandable segments let a growing workload go further before out of memory", "allocator",
       "both growing workloads: expandable segments train a longer sequence / more steps before OOM than "
       "fixed segments")
def expandable_segments_move_the_oom_point(f: ResultFolder, c: Claim) -> None:
    parts, oks = [], []
    for group, (counter, what, _) in GROWING.items():
        runs = table(f, "bench_allocator").get(group, {})
        if "fixed" in runs and "expandable" in runs:
            reach = {setting: b.counter(counter) for setting, b in runs.items()}
            c.numbers[f"{group} fixed"], c.numbers[f"{group} expandable"] = reach["fixed"], reach["expandable"]
            oks.append(reach["expandable"] > reach["fixed"])
            parts.append(f"{group}, {what}: " + ", ".join(f"{s} {v:.0f}" for s, v in reach.items()))
    if oks:
        c.verdict, c.measured = _verdict(all(oks)), "; ".join(parts)


@claim("Reserved memory that keeps growing means a leak", "allocator",
       "20 training steps: reserved memory grows (step 3 to 20) only in the run that keeps a tensor every step, "
       "not in the runs that leak nothing (fixed and growing sequence length)")
def growing_reserved_means_a_leak(f: ResultFolder, c: Claim) -> None:
    runs = table(f, "bench_allocator").get("ReservedGrowth", {})
    if "leak" not in runs or len(runs) < 2:
        return
    growth = {s: b.counter("reserved_growth_bytes") for s, b in runs.items()}
    kept = {s: b.counter("allocated_at_step_end_growth_bytes") for s, b in runs.items()}
    c.numbers.update({f"{s} reserved growth": g for s, g in growth.items()})
    # The claim, as a rule: reserved grows => something leaks. A run without a leak whose reserved
    # memory grows contradicts it.
    c.verdict = _verdict(all(g <= 0 for s, g in growth.items() if s != "leak"))
    change = lambda x: "flat" if x == 0 else f"{'+' if x > 0 else ''}{fmt_bytes(x)}"
    c.measured = "; ".join(f"{s}: reserved {change(g)}, allocated at step end {change(kept[s])}"
                           for s, g in growth.items())


# --- ZeRO (bench_zero, one file per world size)

def zero_point(b: Benchmark) -> tuple[int, int, str] | None:
    """(stage, world size, offload) of a bench_zero run, from its counters or its name's key:value
    arguments; None if they cannot be found."""
    a = {k.lower(): v for k, v in args(b).items()}
    # bench_zero's own names: .../zero<stage>/offload_<what>
    m = re.search(r"/zero(\d)(?:/|$)", b.name)
    if m:
        a.setdefault("stage", m.group(1))
    m = re.search(r"offload[_:=](\w+)", b.name)
    if m:
        a.setdefault("offload", m.group(1))

    def pick(*keys):
        for k in keys:
            if k in b.counters:
                return int(b.counters[k])
            if k in a:
                return int(re.sub(r"\D", "", a[k]) or -1)
        return None
    stage = pick("stage", "zero_stage", "zero")
    world = pick("world_size", "world", "ranks", "np", "n")
    if stage is None or world is None:
        return None
    offload = a.get("offload", "none")
    if "offload" in b.label and offload == "none":
        offload = b.label.split("offload", 1)[1].strip(" =:") or "on"
    return stage, world, offload


def model_state_bytes(b: Benchmark) -> float:
    """Parameters + gradients + optimizer state on the device: bench_zero's <category>_bytes (held
    through training), else the categories' peaks."""
    cats = ("parameters", "gradients", "optimizer_state")
    if all(f"{c}_bytes" in b.counters for c in cats):
        return sum(b.counters[f"{c}_bytes"] for c in cats)
    return sum(b.counter(f"{c}_peak_bytes", 0) for c in cats)


def zero_runs(f: ResultFolder) -> dict[tuple[int, int], Benchmark]:
    """(stage, world size) -> bench_zero's run of it without offload."""
    runs = {}
    for b in f.runs("bench_zero"):
        p = zero_point(b)
        if p and p[2] in ("none", ""):
            runs[(p[0], p[1])] = b
    return runs


@claim("ZeRO-3 divides the model states by the number of ranks N", "zero",
       "per-rank parameters + gradients + optimizer state, every N > 1: stage 0 / stage 3 at least 0.8 N "
       "(no offload)")
def zero3_divides_by_n(f: ResultFolder, c: Claim) -> None:
    runs = zero_runs(f)
    worlds = sorted({w for s, w in runs if s == 3 and (0, w) in runs and w > 1})
    parts, oks = [], []
    for n in worlds:
        before, after = model_state_bytes(runs[(0, n)]), model_state_bytes(runs[(3, n)])
        ratio = before / after
        c.numbers[f"N={n} ratio"] = ratio
        oks.append(ratio >= 0.8 * n)
        parts.append(f"N = {n}: {fmt_bytes(before)} -> {fmt_bytes(after)} per rank (/{ratio:.2f})")
    if oks:
        c.verdict, c.measured = _verdict(all(oks)), "; ".join(parts)
    elif f.runs("bench_zero"):
        c.measured = "bench_zero.json has no stage 0 and stage 3 runs at the same world size > 1"


# The paper's per-rank model states (Rajbhandari et al. 2019), 16-bit Adam: 2Ψ weights, 2Ψ
# gradients, 12Ψ fp32 master weights and moments; stage s partitions the first s of
# (optimizer state, gradients, parameters) over the N ranks.
ZERO_FORMULAS = {0: "2Ψ+2Ψ+12Ψ", 1: "2Ψ+2Ψ+12Ψ/N", 2: "2Ψ+(2Ψ+12Ψ)/N", 3: "(2Ψ+2Ψ+12Ψ)/N"}
STATE_CATEGORIES = ("parameters", "gradients", "optimizer_state")


def zero_paper_bytes(b: Benchmark) -> float:
    """The paper's formula for this run (bench_zero's paper_<category>_bytes, from the model's Ψ)."""
    return sum(b.counters[f"paper_{c}_bytes"] for c in STATE_CATEGORIES)


def zero_exact_bytes(b: Benchmark) -> float:
    """This implementation's exact formula (padding to N, 512-byte rounding): predicted_<category>_bytes."""
    return sum(b.counters[f"predicted_{c}_bytes"] for c in STATE_CATEGORIES)


@claim("ZeRO's per-rank model states are 2Ψ+2Ψ+12Ψ (stage 0), 2Ψ+2Ψ+12Ψ/N (1), 2Ψ+(2Ψ+12Ψ)/N (2), "
       "(2Ψ+2Ψ+12Ψ)/N (3)", "zero",
       "every run without offload: measured parameters + gradients + optimizer state within 1% of the paper's "
       "formula (the rest is padding to N and 512-byte rounding) and equal to the exact formula to the byte")
def zero_states_follow_the_formulas(f: ResultFolder, c: Claim) -> None:
    runs = zero_runs(f)
    if not runs:
        return
    oks, worst, exact = [], 0.0, 0
    for (stage, n), b in sorted(runs.items()):
        measured, paper = model_state_bytes(b), zero_paper_bytes(b)
        gap = _pct(measured, paper)
        worst = max(worst, abs(gap))
        exact += measured == zero_exact_bytes(b)
        oks.append(abs(gap) <= 1 and measured == zero_exact_bytes(b))
        c.numbers[f"stage {stage} N={n} measured / paper"] = measured / paper
    c.numbers["largest gap to the paper %"] = worst
    c.verdict = _verdict(all(oks))
    c.measured = f"{exact} of {len(runs)} runs equal to the exact formula to the byte; largest gap to the paper {worst:.2f}%"
    psi = next((zero_paper_bytes(b) / 16 for (stage, _), b in runs.items() if stage == 0), None)
    if psi:
        c.measured += f" (Ψ = {psi:,.0f} parameters)"
    largest = max(n for _, n in runs)
    stage3 = runs.get((3, largest))
    if stage3 is not None:
        c.measured += (f"; stage 3, N = {largest}: {fmt_bytes(model_state_bytes(stage3))} measured, "
                       f"{fmt_bytes(zero_paper_bytes(stage3))} = {ZERO_FORMULAS[3]}")


@claim("ZeRO-1 and ZeRO-2 communicate as much as data parallel (2Ψ per step), ZeRO-3 50% more (3Ψ)", "zero",
       "communicated volume per step in units of Ψ·(bytes per element), from stage 0's 2Ψ: stages 1-2 within 2% "
       "of 2Ψ, stage 3 within 5% of 3Ψ, at every world size > 1")
def zero_communication(f: ResultFolder, c: Claim) -> None:
    runs = zero_runs(f)
    parts, oks = [], []
    for n in sorted({n for _, n in runs if n > 1}):
        if (0, n) not in runs:
            continue
        # Ψ·e: the paper's 16-bit (or fp32) weights of stage 0, where nothing is partitioned.
        psi_e = runs[(0, n)].counters["paper_parameters_bytes"]
        multiples = {s: runs[(s, n)].counters["comm_volume_bytes_per_step"] / psi_e
                     for s in range(4) if (s, n) in runs}
        for s, m in multiples.items():
            c.numbers[f"N={n} stage {s} volume / Ψe"] = m
            oks.append(abs(m / (3 if s == 3 else 2) - 1) <= (0.05 if s == 3 else 0.02))
        parts.append(f"N = {n}: " + ", ".join(f"stage {s} {m:.2f}Ψ" for s, m in multiples.items()))
    if oks:
        c.verdict, c.measured = _verdict(all(oks)), "; ".join(parts)


# --- FSDP (bench_fsdp, one file per world size)

def fsdp_layers_per_unit(setting_unit: str) -> int:
    """--fsdp-unit as bench_fsdp names it: "layer" -> 1, "2-layers" -> 2."""
    return 1 if setting_unit == "layer" else int(setting_unit.split("-")[0])


def fsdp_full_shard_runs(f: ResultFolder) -> dict[tuple[int, int, bool], Benchmark]:
    """(world size, layers per unit, prefetch) -> the FULL_SHARD run. Names:
    BM_Fsdp/<model>/<full|grad_op|none>/<layer|K-layers>/<prefetch|no_prefetch>."""
    runs = {}
    for b in f.runs("bench_fsdp"):
        parts = b.name.split("/")
        if len(parts) >= 5 and parts[2] == "full":
            runs[(int(b.counter("world_size", 1)), fsdp_layers_per_unit(parts[3]), parts[4] == "prefetch")] = b
    return runs


@claim("FSDP's peak is the shard plus the gathered units (one unit at a time, two with prefetch)", "fsdp",
       "FULL_SHARD, every world size and unit size: parameters peak = shard + root + gathered layer units "
       "(fsdp_memory.h) to the byte, with 1 layer unit gathered at the peak without prefetch and 2 with it "
       "(1 when the whole stack is one unit)")
def fsdp_peak_is_shard_plus_units(f: ResultFolder, c: Claim) -> None:
    runs = fsdp_full_shard_runs(f)
    oks, parts = [], []
    for (n, k, prefetch), b in sorted(runs.items()):
        measured, predicted = b.counter("parameters_peak_bytes"), b.counter("predicted_parameters_peak_bytes")
        units = b.counter("gathered_units_at_peak")
        alone = runs.get((n, k, not prefetch))
        one_unit = alone is not None and alone.counter("parameters_peak_bytes") == measured  # nothing to prefetch
        expected_units = 2 if prefetch and not one_unit else 1
        oks.append(measured == predicted and units == expected_units)
        c.numbers[f"N={n} {k}-layer units {'prefetch' if prefetch else 'no prefetch'} gathered"] = units
        # The split measured: with equal units, peak(off) = base + F and peak(on) = base + 2F, so
        # F = on - off and base (shard + root) = 2 off - on.
        if prefetch and alone is not None and not one_unit:
            unit, base = measured - alone.counter("parameters_peak_bytes"), 2 * alone.counter("parameters_peak_bytes") - measured
            parts.append(f"N = {n}, {k}-layer units: {fmt_bytes(alone.counter('parameters_peak_bytes'))} = "
                         f"{fmt_bytes(base)} + 1 x {fmt_bytes(unit)}, with prefetch {fmt_bytes(measured)} = "
                         f"{fmt_bytes(base)} + 2 x {fmt_bytes(unit)}")
    if oks:
        c.verdict = _verdict(all(oks))
        exact = sum(b.counter("parameters_peak_bytes") == b.counter("predicted_parameters_peak_bytes")
                    for b in runs.values())
        c.measured = f"{exact} of {len(runs)} runs equal to the formula to the byte" + \
            ("; " + "; ".join(parts) if parts else "")


def evaluate(folder: ResultFolder) -> list[Claim]:
    """Every claim against this folder, in the catalog's order."""
    return [check(folder) for check in CLAIMS]
