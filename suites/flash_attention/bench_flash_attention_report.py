"""How the report (reports/trainmem_report) presents bench_flash_attention: naive against flash
attention per sequence length, its plots against T (with the `trainmem train --attention` runs
ci/suite makes), and the claim it tests."""
from __future__ import annotations

import math
import pathlib
import re

from reports.trainmem_report import plots
from reports.trainmem_report.claims import Claim, claim, verdict
from reports.trainmem_report.document import MiB, Figure
from reports.trainmem_report.presentation import Suite, args, words
from reports.trainmem_report.results import Benchmark, ResultFolder


def _group(b: Benchmark) -> str:
    a = args(b)
    gqa = f" Hkv={a['Hkv']}" if "Hkv" in a else ""  # grouped-query attention (the Llama family's)
    return f"{words(b)[2]} T={a.get('T')} D={a.get('D')} causal={a.get('causal')}{gqa}"


def attention_batch(b: Benchmark) -> float | None:
    """An attention case's batch B: its counter, else its label ("B=8 H=4")."""
    if b.counter("B") is not None:
        return b.counter("B")
    m = re.search(r"\bB=(\d+)", b.label)
    return float(m.group(1)) if m else None


def attention_shape_words(cases: set[tuple[float | None, float]]) -> str:
    """What stays fixed as T varies, from the (B, T) of the cases: "B·T = 1024 fixed" (the CPU
    shapes), "B = 8 fixed", or "B varies" when neither holds."""
    if any(batch is None for batch, _ in cases):
        return "B not recorded"
    tokens = {batch * t for batch, t in cases}
    batches = {batch for batch, _ in cases}
    if len(tokens) == 1 and len(batches) > 1:
        return f"B·T = {int(tokens.pop())} fixed (B = {', '.join(f'{b:g}' for b in sorted(batches))})"
    if len(batches) == 1:
        return f"B = {batches.pop():g} fixed"
    return "B varies"


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


def attention_figures(folder: ResultFolder, suite: Suite, out: pathlib.Path) -> list[Figure]:
    """Saved bytes and TFLOP/s against T for each implementation (non-causal, smallest D)."""
    runs = folder.runs(suite.bench)
    figures = []
    for pass_name in ("fwd", "fwd_bwd"):
        memory, speed, batches = {}, {}, set()
        for b in runs:
            parts = b.name.split("/")
            if len(parts) < 3 or parts[2] != pass_name or b.counter("causal") != 0:
                continue
            key = f"{parts[1]} D={int(b.counter('D', 0))}"
            memory.setdefault(key, []).append((b.counter("T"), b.counter("saved_bytes") / MiB))
            speed.setdefault(key, []).append((b.counter("T"), b.counter("TFLOP/s")))
            batches.add((attention_batch(b), b.counter("T")))
        if memory:
            shape = attention_shape_words(batches)
            figures.append(Figure(plots.lines(memory, f"attention {pass_name}: memory saved for backward vs T, {shape}",
                                              f"sequence length T ({shape})", "MiB",
                                              out / f"attention-memory-{pass_name}.png", logx=True, logy=True),
                                  f"Attention ({pass_name}, non-causal): bytes kept for the backward vs T, {shape}."))
            figures.append(Figure(plots.lines(speed, f"attention {pass_name}: TFLOP/s vs T, {shape}",
                                              f"sequence length T ({shape})", "TFLOP/s",
                                              out / f"attention-tflops-{pass_name}.png", logx=True),
                                  f"Attention ({pass_name}, non-causal): achieved TFLOP/s vs T, {shape}."))
    series = {k: [(t, b / MiB) for t, b in v] for k, v in attention_memory_series(folder).items()}
    if series:
        figures.append(Figure(plots.lines(series, "GPT activation peak vs T (trainmem train)", "sequence length T",
                                          "activation peak (MiB)", out / "attention-train-activations.png",
                                          logx=True, logy=True),
                              "Whole-model activation peak measured by the allocator, naive vs flash attention."))
    return figures


SUITE = Suite(
    "flash_attention", "Flash attention", "bench_flash_attention",
    "naive (materialized T x T) against flash attention, per sequence length",
    group=_group, setting=lambda b: words(b)[1],
    columns=[("saved_bytes", "saved for backward", "bytes"), ("workspace_bytes", "workspace", "bytes"),
             ("TFLOP/s", "TFLOP/s", "number")],
    order=6, technique_order=5,
    figures=attention_figures)


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of log y against log x: the exponent k in y ~ x^k."""
    xs = [math.log(x) for x, _ in points]
    ys = [math.log(y) for _, y in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


@claim("Flash attention needs O(N) memory in the sequence length (naive: O(N^2))", SUITE,
       "exponent k of activation peak ~ T^k (trainmem train, allocator-measured): flash k <= 1.15")
def flash_attention_linear(f: ResultFolder, c: Claim) -> None:
    series = attention_memory_series(f)
    if len(series.get("flash", [])) >= 3:
        k = _slope(series["flash"])
        c.numbers["flash exponent"] = k
        c.verdict = verdict(k <= 1.15)
        c.measured = f"flash k = {k:.2f}"
        if len(series.get("naive", [])) >= 3:
            c.numbers["naive exponent"] = _slope(series["naive"])
            c.measured += f", naive k = {c.numbers['naive exponent']:.2f}"
        c.measured += f" over T = {', '.join(str(int(t)) for t, _ in sorted(series['flash']))}"
