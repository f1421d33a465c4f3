"""How the report (reports/trainmem_report) presents bench_zero: per-rank memory against the ZeRO
stage, world size and offload, beside the paper's formulas and this implementation's exact ones
(zero_memory.h), and the claims it tests."""
from __future__ import annotations

import pathlib
import re

from reports.trainmem_report import plots
from reports.trainmem_report.claims import Claim, claim, pct, verdict
from reports.trainmem_report.document import MiB, Figure, Table, fmt_bytes
from reports.trainmem_report.presentation import MEMORY_COLUMNS, Suite, args, measured_and_formula
from reports.trainmem_report.results import Benchmark, ResultFolder
from reports.trainmem_report.result_schema import PEAK_ALLOCATED, category_peak_counter


def zero_point(b: Benchmark) -> tuple[int, int, str] | None:
    """(stage, world size, offload) of a bench_zero run: the stage and offload from its counters or
    its name's key:value arguments (None if they cannot be found), the world size its file's."""
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
    if stage is None:
        return None
    offload = a.get("offload", "none")
    if "offload" in b.label and offload == "none":
        offload = b.label.split("offload", 1)[1].strip(" =:") or "on"
    return stage, b.world_size, offload


def model_state_bytes(b: Benchmark) -> float:
    """Parameters + gradients + optimizer state on the device: bench_zero's <category>_bytes (held
    through training), else the categories' peaks."""
    cats = STATE_CATEGORIES
    if all(f"{c}_bytes" in b.counters for c in cats):
        return sum(b.counters[f"{c}_bytes"] for c in cats)
    return sum(b.counter(category_peak_counter(c), 0) for c in cats)


def zero_runs(f: ResultFolder) -> dict[tuple[int, int], Benchmark]:
    """(stage, world size) -> bench_zero's run of it without offload."""
    runs = {}
    for b in f.runs(SUITE.bench):
        p = zero_point(b)
        if p and p[2] in ("none", ""):
            runs[(p[0], p[1])] = b
    return runs


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


def zero_figures(folder: ResultFolder, suite: Suite, out: pathlib.Path) -> list[Figure]:
    """Per-rank model states against world size, one line per stage (and offload), and the paper's
    formula for each stage dashed beside it."""
    series: dict[str, list[tuple[float, float]]] = {}
    dashed: dict[str, str] = {}
    for b in folder.runs(suite.bench):
        p = zero_point(b)
        if p:
            stage, world, offload = p
            name = f"stage {stage}" + ("" if offload in ("none", "") else f" offload {offload}")
            states = model_state_bytes(b) or b.counter(PEAK_ALLOCATED, 0)
            series.setdefault(name, []).append((world, states / MiB))
            if offload in ("none", "") and all(f"paper_{c}_bytes" in b.counters for c in STATE_CATEGORIES):
                formula = f"{ZERO_FORMULAS.get(stage, f'stage {stage}')} (paper)"
                series.setdefault(formula, []).append((world, zero_paper_bytes(b) / MiB))
                dashed[formula] = name
    if not series:
        return []
    path = plots.lines(series, "ZeRO: per-rank model states vs world size", "ranks N", "MiB per rank",
                       out / "zero-per-rank.png", logx=True, logy=True, dashed=dashed)
    return [Figure(path, "Per-rank parameters + gradients + optimizer state for each ZeRO stage, measured by the "
                         "allocator (solid) and the paper's formula for the same Ψ and N (dashed).")]


def zero_formula_table(folder: ResultFolder, suite: Suite) -> list[Table]:
    """Each run's measured model states next to the paper's formula and the exact one."""
    rows = []
    for b in folder.runs(suite.bench):
        p = zero_point(b)
        needed = [f"{kind}_{c}_bytes" for kind in ("paper", "predicted") for c in STATE_CATEGORIES]
        if not p or not all(k in b.counters for k in needed):
            continue
        stage, world, offload = p
        measured, paper = model_state_bytes(b), zero_paper_bytes(b)
        formula = ZERO_FORMULAS.get(stage, "?") if offload in ("none", "") else f"offload {offload}"
        rows.append([str(world), str(stage), offload, fmt_bytes(measured), fmt_bytes(zero_exact_bytes(b)),
                     formula, fmt_bytes(paper), f"{measured / paper:.4f}" if paper else "-"])
    if not rows:
        return []
    return [Table(["N", "stage", "offload", "measured (params + grads + optimizer)", "exact formula",
                   "paper's formula", "paper", "measured / paper"], rows,
                  caption="Per-rank model states: measured, this implementation's exact formula, and the paper's")]


# BM_Zero/<model>/N<ranks>/zero<stage>/offload_<what>, one file per world size (mpirun -np N).
# Categories as common/sharding/sharding_engine.h says: a gathered unit is parameters, a gradient
# bucket gradients (their peaks); communication peak is buffers that only move bytes (0).
SUITE = Suite(
    "zero", "ZeRO", "bench_zero", "per-rank memory vs ZeRO stage, world size and offload",
    group=lambda b: " ".join(b.name.split("/")[1:3]), setting=lambda b: " ".join(b.name.split("/")[3:]),
    columns=[("parameters_bytes", "parameters", "bytes"), ("gradients_bytes", "gradients", "bytes"),
             ("optimizer_state_bytes", "optimizer state", "bytes"),
             (category_peak_counter("parameters"), "parameters peak", "bytes"),
             (category_peak_counter("gradients"), "gradients peak", "bytes"),
             (category_peak_counter("communication"), "communication peak", "bytes"),
             ("host_bytes", "host (offload)", "bytes"),
             ("comm_volume_bytes_per_step", "comm volume / step", "bytes")] + MEMORY_COLUMNS,
    details=[("Measured against this implementation's exact formula (suites/zero/zero_memory.h)", "BM_Zero/",
              measured_and_formula([("parameters_bytes", "parameters"), ("gradients_bytes", "gradients"),
                                    ("optimizer_state_bytes", "optimizer state"),
                                    (category_peak_counter("parameters"), "parameters peak"),
                                    (category_peak_counter("gradients"), "gradients peak"),
                                    (category_peak_counter("communication"), "communication peak"),
                                    ("host_bytes", "host"), ("comm_volume_bytes_per_step", "comm volume / step")]))],
    order=8, technique_order=8,
    figures=zero_figures,
    tables=zero_formula_table)


@claim("ZeRO-3 divides the model states by the number of ranks N", SUITE,
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
        c.verdict, c.measured = verdict(all(oks)), "; ".join(parts)
    elif f.runs(SUITE.bench):
        c.measured = f"{SUITE.bench}.json has no stage 0 and stage 3 runs at the same world size > 1"


@claim("ZeRO's per-rank model states are 2Ψ+2Ψ+12Ψ (stage 0), 2Ψ+2Ψ+12Ψ/N (1), 2Ψ+(2Ψ+12Ψ)/N (2), "
       "(2Ψ+2Ψ+12Ψ)/N (3)", SUITE,
       "every run without offload: measured parameters + gradients + optimizer state within 1% of the paper's "
       "formula (the rest is padding to N and 512-byte rounding) and equal to the exact formula to the byte")
def zero_states_follow_the_formulas(f: ResultFolder, c: Claim) -> None:
    runs = zero_runs(f)
    if not runs:
        return
    oks, worst, exact = [], 0.0, 0
    for (stage, n), b in sorted(runs.items()):
        measured, paper = model_state_bytes(b), zero_paper_bytes(b)
        gap = pct(measured, paper)
        worst = max(worst, abs(gap))
        exact += measured == zero_exact_bytes(b)
        oks.append(abs(gap) <= 1 and measured == zero_exact_bytes(b))
        c.numbers[f"stage {stage} N={n} measured / paper"] = measured / paper
    c.numbers["largest gap to the paper %"] = worst
    c.verdict = verdict(all(oks))
    c.measured = f"{exact} of {len(runs)} runs equal to the exact formula to the byte; largest gap to the paper {worst:.2f}%"
    psi = next((zero_paper_bytes(b) / 16 for (stage, _), b in runs.items() if stage == 0), None)
    if psi:
        c.measured += f" (Ψ = {psi:,.0f} parameters)"
    largest = max(n for _, n in runs)
    stage3 = runs.get((3, largest))
    if stage3 is not None:
        c.measured += (f"; stage 3, N = {largest}: {fmt_bytes(model_state_bytes(stage3))} measured, "
                       f"{fmt_bytes(zero_paper_bytes(stage3))} = {ZERO_FORMULAS[3]}")


@claim("ZeRO-1 and ZeRO-2 communicate as much as data parallel (2Ψ per step), ZeRO-3 50% more (3Ψ)", SUITE,
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
        c.verdict, c.measured = verdict(all(oks)), "; ".join(parts)
