"""The guides' claims (DESIGN.md, "The claims to test"), each checked against the measured
numbers of one results folder. A verdict is computed from the numbers by the criterion written
next to it: "holds", "does not hold", or "not measured" when the results it needs are absent.
Nothing here knows the answer in advance.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .document import fmt_bytes, fmt_percent
from .results import Benchmark, ResultFolder
from .suites import args, safe_split, suite_for

HOLDS, FAILS, NOT_MEASURED = "holds", "does not hold", "not measured"


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
            except (TypeError, ValueError, ZeroDivisionError, KeyError, IndexError) as e:
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


def _verdict(ok: bool) -> str:
    return HOLDS if ok else FAILS


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
            oks.append(saving >= 30 and overhead <= 30)
            parts.append(f"{group}: memory -{saving:.1f}%, time {fmt_percent(overhead)}")
    if oks:
        c.verdict, c.measured = _verdict(all(oks)), "; ".join(parts)


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
            oks.append(saving > 0 and overhead <= 50)
            parts.append(f"{group}: activations -{saving:.1f}%, time {fmt_percent(overhead)}")
    if oks:
        c.verdict, c.measured = _verdict(all(oks)), "; ".join(parts)


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
       "bf16 step time shorter than fp32 on this device")
def mixed_precision_is_faster(f: ResultFolder, c: Claim) -> None:
    for group, runs in table(f, "bench_mixed_precision").items():
        if "fp32" in runs and "bf16" in runs:
            change = _pct(runs["bf16"].real_time_ms, runs["fp32"].real_time_ms)
            c.numbers["bf16 time change %"] = change
            c.verdict = _verdict(change < 0)
            c.measured = f"{group}: bf16 step {runs['bf16'].real_time_ms:.1f} ms vs fp32 {runs['fp32'].real_time_ms:.1f} ms ({fmt_percent(change)})"
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
            c.numbers["saving %"], c.numbers["overhead %"] = saving, overhead
            c.verdict = _verdict(small.counter("peak_allocated_bytes") < whole.counter("peak_allocated_bytes"))
            c.measured = (f"{group}: {suite_for('bench_accumulation').setting(small)} "
                          f"{fmt_bytes(small.counter('peak_allocated_bytes'))} vs "
                          f"{suite_for('bench_accumulation').setting(whole)} "
                          f"{fmt_bytes(whole.counter('peak_allocated_bytes'))} (-{saving:.1f}%), "
                          f"time per step {fmt_percent(overhead)}")
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
       "training step: device data bytes lower with lazy than eager, tokens/s at least 90% of eager")
def lazy_loading_saves_device_memory(f: ResultFolder, c: Claim) -> None:
    for group, runs in table(f, "bench_lazy_loading").items():
        if group.startswith("training") and "eager" in runs and "lazy" in runs:
            eager, lazy = runs["eager"], runs["lazy"]
            speed = lazy.counter("tokens_per_s") / eager.counter("tokens_per_s")
            c.numbers["speed ratio"] = speed
            c.verdict = _verdict(lazy.counter("data_peak_bytes", 0) < eager.counter("data_peak_bytes", 0) and speed >= 0.9)
            c.measured = (f"data on device {fmt_bytes(lazy.counter('data_peak_bytes'))} (lazy) vs "
                          f"{fmt_bytes(eager.counter('data_peak_bytes'))} (eager); tokens/s x{speed:.2f}")


@claim("pin_memory gives faster host-to-device transfers", "lazy_loading",
       "loader only: batches/s with pinned staging at least 5% above unpinned")
def pinned_memory_is_faster(f: ResultFolder, c: Claim) -> None:
    runs = table(f, "bench_lazy_loading").get("loader only", {})
    if "lazy" in runs and "lazy_unpinned" in runs:
        ratio = runs["lazy"].counter("tokens_per_s") / runs["lazy_unpinned"].counter("tokens_per_s")
        c.numbers["speed ratio"] = ratio
        c.verdict = _verdict(ratio >= 1.05)
        c.measured = f"pinned / unpinned throughput x{ratio:.2f}"
        if f.device.get("kind") == "cpu":
            c.measured += " (CPU backend: no host-to-device copy exists to speed up)"


@claim("Caching exists because asking the device for memory is slow", "allocator_ops",
       "alloc+free with the cache faster than with the device (raw) at every size")
def caching_beats_device(f: ResultFolder, c: Claim) -> None:
    parts, oks = [], []
    for group, runs in table(f, "bench_allocator_ops").items():
        if "caching" in runs and "raw" in runs and "AllocFree" in group:
            speedup = runs["raw"].real_time_ms / runs["caching"].real_time_ms
            c.numbers[f"{group} speedup"] = speedup
            oks.append(speedup > 1)
            parts.append(f"{group.split()[-1]} B: x{speedup:.1f}")
    if oks:
        c.verdict, c.measured = _verdict(all(oks)), "cache faster by " + ", ".join(parts)


@claim("Calling empty_cache() every step is cheap and reduces fragmentation", "allocator",
       "every-step vs never: step time at most 5% longer and peak reserved / peak allocated lower")
def empty_cache_is_cheap(f: ResultFolder, c: Claim) -> None:
    # BM_TrainEmptyCache/<segments>/<never|every-step|every:N>: one group per segment kind.
    frag = lambda b: b.counter("peak_reserved_bytes") / b.counter("peak_allocated_bytes")
    parts, oks = [], []
    for group, runs in table(f, "bench_allocator").items():
        if "EmptyCache" in group and "never" in runs and "every-step" in runs:
            never, every = runs["never"], runs["every-step"]
            overhead = _pct(every.real_time_ms, never.real_time_ms)
            c.numbers[f"{group} overhead %"] = overhead
            c.numbers[f"{group} reserved/allocated never"] = frag(never)
            c.numbers[f"{group} reserved/allocated every step"] = frag(every)
            oks.append(overhead <= 5 and frag(every) < frag(never))
            parts.append(f"{group}: time {fmt_percent(overhead)}, peak reserved/allocated {frag(every):.3f} "
                         f"(every step) vs {frag(never):.3f} (never)")
    if oks:
        c.verdict, c.measured = _verdict(all(oks)), "; ".join(parts)
    elif f.runs("bench_allocator"):
        c.measured = "bench_allocator.json has no TrainEmptyCache never / every-step pair"


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


@claim("ZeRO-3 divides the model states by the number of ranks N", "zero",
       "per-rank parameters + gradients + optimizer state: stage 0 / stage 3 at least 0.8 N (no offload)")
def zero3_divides_by_n(f: ResultFolder, c: Claim) -> None:
    points = {}
    for b in f.runs("bench_zero"):
        p = zero_point(b)
        if p and p[2] in ("none", ""):
            points[(p[0], p[1])] = model_state_bytes(b)
    worlds = sorted({w for s, w in points if s == 3 and (0, w) in points and w > 1})
    if worlds:
        n = worlds[-1]
        ratio = points[(0, n)] / points[(3, n)]
        c.numbers["ratio"], c.numbers["N"] = ratio, n
        c.verdict = _verdict(ratio >= 0.8 * n)
        c.measured = f"N = {n}: {fmt_bytes(points[(0, n)])} -> {fmt_bytes(points[(3, n)])} per rank (/{ratio:.2f})"
    elif f.runs("bench_zero"):
        c.measured = "bench_zero.json has no stage 0 and stage 3 runs at the same world size > 1"


def evaluate(folder: ResultFolder) -> list[Claim]:
    """Every claim against this folder, in the catalog's order."""
    return [check(folder) for check in CLAIMS]
