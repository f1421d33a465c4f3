"""One results folder -> the report Document (sections with tables, figures and claims), and the
PNG plots it shows. markdown.py and html.py write it out.
"""
from __future__ import annotations

import pathlib
import re

from . import claims as claims_mod
from . import noise, plots
from .document import FORMATTERS, MiB, Document, Figure, Section, Table, fmt_bytes, fmt_ms, fmt_size, fmt_spread
from .errors import OutputError
from .peers import peer_section
from .results import Benchmark, ResultFolder, finite_number
from .snapshot import snapshot_to_pickle
from .suites import SUITES, Suite, safe_split, suite_for, suites_of
from .timeline import CATEGORIES, step_timeline

TRADEOFF_SUITES = {  # suite -> (memory counter on the y axis, its axis label)
    "checkpointing": ("activations_peak_bytes", "activations peak (MiB)"),
    "accumulation": ("peak_allocated_bytes", "peak allocated (MiB)"),
    "mixed_precision": ("peak_allocated_bytes", "peak allocated (MiB)"),
    "gradient_memory": ("peak_allocated_bytes", "peak allocated (MiB)"),
}


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def device_rows(folder: ResultFolder) -> list[list[str]]:
    d, a = folder.device, folder.allocator
    rows = [["device", folder.device_name()], ["kind", str(d.get("kind", "?"))]]
    if d.get("kind") == "cuda":
        rows += [["memory", fmt_bytes(d.get("total_memory_bytes"))], ["driver", str(d.get("driver_version", "?"))],
                 ["CUDA runtime", str(d.get("runtime_version", "?"))], ["cuDNN", str(d.get("cudnn_version", "-"))],
                 ["compute capability", str(d.get("compute_capability", "?"))]]
    else:
        rows += [["device-memory budget", fmt_bytes(d.get("device_memory_bytes"))],
                 ["host memory", fmt_bytes(d.get("total_memory_bytes"))], ["cores", str(d.get("cpu_cores", "?"))]]
    rows.append(["allocator", str(a.get("config", "?"))])
    # Google Benchmark records the 1-minute load average: above the core count, other work
    # shared the machine and the times are inflated (memory figures are not affected).
    loads = [finite_number(c["load_avg"][0]) for c in folder.contexts.values()
             if isinstance(c.get("load_avg"), list) and c["load_avg"]]
    loads = [x for x in loads if x is not None]
    cpus = next((c.get("num_cpus") for c in folder.contexts.values() if c.get("num_cpus")), None)
    if loads:
        rows.append(["load average while benchmarking", f"{min(loads):.1f} to {max(loads):.1f} on {cpus} CPUs"])
    return rows


def run_notice(folder: ResultFolder) -> list[str]:
    """What every page says first about how the results were run: a quick run is a smoke test, and
    cases with too few repetitions have no time comparison."""
    notice = []
    name = folder.name
    if folder.run.get("quick"):
        notice.append(f"{name}: a quick run ({folder.run.get('command', 'ci/suite --quick')}: "
                      f"{folder.run.get('repetitions', '?')} repetitions of at least {folder.run.get('min_time_s', '?')} s "
                      "per case). A smoke test: its times are indicative only, and a time difference within the "
                      "noise of the repetitions is reported as not resolved.")
    few = [b for runs in folder.benchmarks.values() for b in runs if noise.spread_ms(b) is None]
    if few:
        notice.append(f"{name}: {len(few)} benchmark case(s) have fewer than {noise.MIN_REPETITIONS} repetitions "
                      "(no measured spread): no time comparison with them is resolved.")
    return notice


def grouped(folder: ResultFolder, suite: Suite) -> dict[str, list[tuple[str, Benchmark]]]:
    """group -> [(setting, benchmark)] in the order the benchmarks ran."""
    out: dict[str, list[tuple[str, Benchmark]]] = {}
    for b in folder.runs(suite.bench):
        group, setting = safe_split(suite, b)
        out.setdefault(group, []).append((setting, b))
    return out


def suite_table(folder: ResultFolder, suite: Suite) -> Table:
    columns = [c for c in suite.columns if any(c[0] in b.counters for b in folder.runs(suite.bench))]
    rows = []
    for b in folder.runs(suite.bench):  # in the order they ran, as in the JSON
        group, setting = safe_split(suite, b)
        rows.append([group, setting, fmt_ms(b.real_time_ms), fmt_spread(b.time_stddev_ms, b.repetitions)] +
                    [FORMATTERS[kind](b.counter(key)) for key, _, kind in columns])
    return Table(["group", "setting", "time / iteration", "spread"] + [h for _, h, _ in columns], rows,
                 caption=f"{suite.bench}.json (time: median of the repetitions; spread: their standard deviation)")


def category_figures(folder: ResultFolder, suite: Suite, out: pathlib.Path) -> list[Figure]:
    figures = []
    for group, runs in grouped(folder, suite).items():
        bars = [(setting, {c: b.counter(f"{c}_peak_bytes", 0) for c in CATEGORIES}, b.counter("peak_allocated_bytes"))
                for setting, b in runs]
        if any(sum(cats.values()) for _, cats, _ in bars):
            path = plots.category_bars(bars, f"{suite.title}: {group}", out / f"{suite.key}-categories-{slug(group)}.png")
            figures.append(Figure(path, f"{suite.title}, {group}: each category's peak per setting "
                                        "(black: peak allocated)."))
    return figures


def tradeoff_figure(folder: ResultFolder, suite: Suite, out: pathlib.Path) -> list[Figure]:
    if suite.key not in TRADEOFF_SUITES:
        return []
    counter, ylabel = TRADEOFF_SUITES[suite.key]
    series = {}
    for group, runs in grouped(folder, suite).items():
        measured = [(setting, b) for setting, b in runs if b.counter(counter)]
        # On the front: no other setting holds at most as much memory and is faster beyond the noise.
        series[group] = [plots.TradeoffPoint(setting, b.real_time_ms, b.counter(counter), noise.spread_ms(b) or 0.0,
                                             not any(o is not b and o.counter(counter) <= b.counter(counter) and
                                                     noise.is_less(o, b) for _, o in measured))
                         for setting, b in measured]
    series = {g: p for g, p in series.items() if p}
    if not series:
        return []
    title = f"{suite.title}: memory vs time" + (" (quick run)" if folder.run.get("quick") else "")
    path = plots.tradeoff(series, title, "time per step (ms), median ± standard deviation", ylabel,
                          out / f"{suite.key}-tradeoff.png")
    return [Figure(path, f"{suite.title}: the memory-time trade-off (lower left is better). The dashed front joins "
                         "the settings that no other setting beats in memory while being faster beyond the noise "
                         f"(noise.py: a gap of more than {noise.K:g} standard deviations).")]


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


def attention_figures(folder: ResultFolder, out: pathlib.Path) -> list[Figure]:
    """Saved bytes and TFLOP/s against T for each implementation (non-causal, smallest D)."""
    runs = folder.runs("bench_flash_attention")
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
    series = {k: [(t, b / MiB) for t, b in v] for k, v in claims_mod.attention_memory_series(folder).items()}
    if series:
        figures.append(Figure(plots.lines(series, "GPT activation peak vs T (trainmem train)", "sequence length T",
                                          "activation peak (MiB)", out / "attention-train-activations.png",
                                          logx=True, logy=True),
                              "Whole-model activation peak measured by the allocator, naive vs flash attention."))
    return figures


def zero_figures(folder: ResultFolder, out: pathlib.Path) -> list[Figure]:
    """Per-rank model states against world size, one line per stage (and offload), and the paper's
    formula for each stage dashed beside it."""
    series: dict[str, list[tuple[float, float]]] = {}
    dashed: dict[str, str] = {}
    for b in folder.runs("bench_zero"):
        p = claims_mod.zero_point(b)
        if p:
            stage, world, offload = p
            name = f"stage {stage}" + ("" if offload in ("none", "") else f" offload {offload}")
            states = claims_mod.model_state_bytes(b) or b.counter("peak_allocated_bytes", 0)
            series.setdefault(name, []).append((world, states / MiB))
            if offload in ("none", "") and all(f"paper_{c}_bytes" in b.counters for c in claims_mod.STATE_CATEGORIES):
                formula = f"{claims_mod.ZERO_FORMULAS.get(stage, f'stage {stage}')} (paper)"
                series.setdefault(formula, []).append((world, claims_mod.zero_paper_bytes(b) / MiB))
                dashed[formula] = name
    if not series:
        return []
    path = plots.lines(series, "ZeRO: per-rank model states vs world size", "ranks N", "MiB per rank",
                       out / "zero-per-rank.png", logx=True, logy=True, dashed=dashed)
    return [Figure(path, "Per-rank parameters + gradients + optimizer state for each ZeRO stage, measured by the "
                         "allocator (solid) and the paper's formula for the same Ψ and N (dashed).")]


def zero_formula_table(folder: ResultFolder) -> list[Table]:
    """Each run's measured model states next to the paper's formula and the exact one."""
    rows = []
    for b in folder.runs("bench_zero"):
        p = claims_mod.zero_point(b)
        needed = [f"{kind}_{c}_bytes" for kind in ("paper", "predicted") for c in claims_mod.STATE_CATEGORIES]
        if not p or not all(k in b.counters for k in needed):
            continue
        stage, world, offload = p
        measured, paper = claims_mod.model_state_bytes(b), claims_mod.zero_paper_bytes(b)
        formula = claims_mod.ZERO_FORMULAS.get(stage, "?") if offload in ("none", "") else f"offload {offload}"
        rows.append([str(world), str(stage), offload, fmt_bytes(measured), fmt_bytes(claims_mod.zero_exact_bytes(b)),
                     formula, fmt_bytes(paper), f"{measured / paper:.4f}" if paper else "-"])
    if not rows:
        return []
    return [Table(["N", "stage", "offload", "measured (params + grads + optimizer)", "exact formula",
                   "paper's formula", "paper", "measured / paper"], rows,
                  caption="Per-rank model states: measured, this implementation's exact formula, and the paper's")]


def fsdp_figures(folder: ResultFolder, out: pathlib.Path) -> list[Figure]:
    """FULL_SHARD's parameters peak and peak allocated against the unit size (layers per unit), a
    line per world size and prefetch setting."""
    runs = claims_mod.fsdp_full_shard_runs(folder)
    if not runs:
        return []
    figures = []
    for counter, what in (("parameters_peak_bytes", "parameters peak"), ("peak_allocated_bytes", "peak allocated")):
        series: dict[str, list[tuple[float, float]]] = {}
        for (n, k, prefetch), b in runs.items():
            if b.counter(counter) is not None:
                series.setdefault(f"N={n} {'prefetch' if prefetch else 'no prefetch'}", []).append(
                    (k, b.counter(counter) / MiB))
        if series:
            path = plots.lines(series, f"FSDP (FULL_SHARD): {what} vs unit size", "layers per unit", f"{what} (MiB)",
                               out / f"fsdp-{slug(what)}.png", logx=True)
            figures.append(Figure(path, f"FSDP FULL_SHARD, per rank: {what} against the unit size, with and "
                                        "without prefetch (the peak is the shard plus the root plus one gathered "
                                        "unit, two with prefetch)."))
    return figures


def gradient_memory_table(folder: ResultFolder) -> list[Table]:
    """Each mode against persistent gradients in the same group: what it saves at the peak and
    between steps, beside G (persistent's gradients peak: every gradient at once), and its time."""
    suite = suite_for("bench_gradient_memory")
    rows = []
    for group, runs in grouped(folder, suite).items():
        base = dict(runs).get("persistent")
        if base is None:
            continue
        for setting, b in runs:
            if b is base:
                continue
            saved = [base.counter(key) - b.counter(key) for key in ("peak_allocated_bytes", "held_between_steps_bytes")]
            rows.append([group, setting, *map(fmt_bytes, saved), fmt_bytes(base.counter("gradients_peak_bytes")),
                         f"{b.real_time_ms / base.real_time_ms:.2f}", noise.ordering(b, base)])
    if not rows:
        return []
    return [Table(["group", "mode", "peak allocated saved", "held between steps saved", "G (all gradients)",
                   "time / persistent's", "time against persistent"], rows,
                  caption="Against persistent gradients (a mode that frees every gradient after the step saves "
                          "exactly G between steps)")]


def allocator_figures(folder: ResultFolder, out: pathlib.Path) -> list[Figure]:
    """The cost of one alloc+free against the block size per mode, and the growing workloads'
    allocated vs reserved bytes per allocator configuration."""
    figures = []
    cost: dict[str, list[tuple[float, float]]] = {}
    for b in folder.runs("bench_allocator"):
        parts = b.name.split("/")
        if parts[0] == "BM_AllocFree" and "touch" not in parts:
            cost.setdefault("/".join(parts[1:-1]), []).append((float(parts[-1]), b.real_time_ms * 1e3))
    if cost:
        figures.append(Figure(plots.lines(cost, "alloc + free of one block", "block size", "µs",
                                          out / "allocator-alloc-cost.png", logx=True, logy=True,
                                          xtick_label=fmt_size),
                              "Time of one allocate + free: from the cache (hit), after empty_cache (miss: a new "
                              "segment or pages), and raw (one device allocation per request)."))
    suite = suite_for("bench_allocator")
    for family, counters, title in (
            ("GrowingSequence", ("peak_allocated_bytes", "peak_reserved_bytes"),
             "growing sequence until OOM (128 MiB)"),
            ("GrowingWithKeptTensors", ("allocated_at_oom_bytes", "reserved_at_oom_bytes"),
             "growing activation + kept tensors until OOM (256 MiB)"),
            ("ReservedGrowth", ("allocated_at_step_end_growth_bytes", "reserved_growth_bytes"),
             "growth from step 3 to step 20")):
        runs = [(suite.setting(b), b) for b in folder.runs("bench_allocator") if b.name.startswith(f"BM_{family}/")]
        if runs:
            values = {key.replace("_bytes", "").replace("_", " "): [b.counter(key, 0) / MiB for _, b in runs]
                      for key in counters}
            path = plots.grouped_bars([s for s, _ in runs], values, f"allocator: {title}", "MiB",
                                      out / f"allocator-{slug(family)}.png")
            figures.append(Figure(path, f"Allocator, {title}: allocated and reserved bytes per configuration."))
    return figures


def suite_figures(folder: ResultFolder, suite: Suite, out: pathlib.Path, notes: list[str]) -> list[Figure]:
    """Every plot of one suite: category bars, the trade-off curve, and the suite's own scaling plots.
    Plots with more to show than one can (plots.TooManyToDraw) are left out, each with a line in `notes`."""
    own = {"flash_attention": attention_figures, "zero": zero_figures, "fsdp": fsdp_figures,
           "allocator": allocator_figures}
    makers = [("category bars", lambda: category_figures(folder, suite, out)),
              ("memory vs time", lambda: tradeoff_figure(folder, suite, out))]
    if suite.key in own:
        makers.append(("scaling plots", lambda: own[suite.key](folder, out)))
    figures = []
    for what, make in makers:
        try:
            figures += make()
        except plots.TooManyToDraw as e:
            notes.append(f"{suite.title}, {what}: {e}")
    return figures


def detail_tables(folder: ResultFolder, suite: Suite) -> list[Table]:
    """The suite's further tables: one per benchmark family with counters of its own."""
    tables = []
    for title, prefix, columns in suite.details:
        runs = [b for b in folder.runs(suite.bench) if b.name.startswith(prefix)]
        columns = [c for c in columns if any(c[0] in b.counters for b in runs)]
        if runs and columns:
            rows = [list(safe_split(suite, b)) + [FORMATTERS[kind](b.counter(key)) for key, _, kind in columns]
                    for b in runs]
            tables.append(Table(["group", "setting"] + [h for _, h, _ in columns], rows, caption=title))
    return tables


# The techniques side by side on one model: each suite's settings against one baseline measurement,
# bench_baseline's plain step of this preset. (suite, the suite's own setting without the technique):
# a group of the suite is on the same model and batch when that setting's peak allocated equals the
# baseline's to the byte (memory is exact), so no name or label is trusted for it.
SUMMARY_BASELINE = ("bench_baseline", "BM_TrainStep/small")
SUMMARY_SUITES = [("checkpointing", "none"), ("mixed_precision", "fp32"), ("gradient_memory", "persistent"),
                  ("accumulation", "32x1"), ("allocator", "never")]


def summary_section(folder: ResultFolder) -> Section:
    base = next((b for b in folder.runs(SUMMARY_BASELINE[0]) if b.name == SUMMARY_BASELINE[1]), None)
    if base is None:
        raise ValueError(f"{SUMMARY_BASELINE[0]}.json has no {SUMMARY_BASELINE[1]}: nothing to measure against")
    base_peak = base.counter("peak_allocated_bytes")
    rows, elsewhere = [], []
    for key, own_baseline in SUMMARY_SUITES:
        suite = next(s for s in SUITES if s.key == key)
        for group, runs in grouped(folder, suite).items():
            own = dict(runs).get(own_baseline)
            if own is None or own.counter("peak_allocated_bytes") != base_peak:
                elsewhere.append(f"{suite.title} ({group})")
                continue
            for setting, b in runs:
                if b is own:
                    continue
                peak = b.counter("peak_allocated_bytes")
                rows.append([suite.title, setting, fmt_bytes(peak), f"{100 * (1 - peak / base_peak):+.1f}%",
                             f"{fmt_ms(b.real_time_ms)} {fmt_spread(b.time_stddev_ms, b.repetitions)}",
                             f"{100 * (b.real_time_ms / base.real_time_ms - 1):+.1f}%", noise.ordering(b, base)])
    paragraphs = [f"Every technique on one model against one baseline: {SUMMARY_BASELINE[1]} ({base.label}), "
                  f"{fmt_bytes(base_peak)} peak allocated, {fmt_ms(base.real_time_ms)} "
                  f"{fmt_spread(base.time_stddev_ms, base.repetitions)} per step. A suite's group is here when its "
                  "run without the technique has the baseline's peak allocated to the byte (the same model, batch "
                  "and precision)."]
    if elsewhere:
        paragraphs.append("Measured on another model or batch, so not in this table: " + ", ".join(elsewhere) + ".")
    return Section("Techniques side by side", paragraphs,
                   tables=[Table(["technique", "setting", "peak allocated", "memory saved", "time / step",
                                  "time paid", "time against the baseline"], rows,
                                 caption="memory saved and time paid, both against the same baseline run")])


def claims_table(claims: list[claims_mod.Claim]) -> Table:
    return Table(["claim", "verdict", "measured", "criterion"],
                 [[c.claim, c.verdict, c.measured or "-", c.criterion] for c in claims])


def suite_section(folder: ResultFolder, suite: Suite, claims: list[claims_mod.Claim], out: pathlib.Path) -> Section:
    s = Section(f"{suite.title} ({suite.bench})", suite.paragraphs())
    s.tables.append(suite_table(folder, suite))
    s.tables += detail_tables(folder, suite)
    if suite.key == "zero":
        s.tables += zero_formula_table(folder)
    if suite.key == "gradient_memory":
        s.tables += gradient_memory_table(folder)
    s.figures += suite_figures(folder, suite, out, s.paragraphs)  # a plot not drawn: a paragraph says why
    mine = [c for c in claims if c.suite == suite.key]
    if mine:
        s.tables.append(claims_table(mine))
    s.links += [(p.name, p) for p in folder.bench_files.get(suite.bench, [])]
    return s


def timeline_section(folder: ResultFolder, out: pathlib.Path) -> Section:
    t = step_timeline(folder.trace)
    s = Section("Memory timeline of one training step",
                [f"Allocated bytes by category over the allocator events of step {t.step} (replayed from "
                 "memory-trace.json), reserved bytes dashed; phases shaded. Peak of the step: "
                 f"{fmt_bytes(max(t.total()))} allocated, {fmt_bytes(max(t.reserved))} reserved."])
    s.figures.append(Figure(plots.memory_timeline(t, f"one training step (step {t.step})", out / "memory-timeline.png"),
                            "Memory timeline of one step, stacked by category."))
    s.links.append(("memory-trace.json", folder.path / "memory-trace.json"))
    return s


def snapshot_section(folder: ResultFolder, out: pathlib.Path) -> Section:
    pickle_path = snapshot_to_pickle(folder.snapshot_path, out / "memory-snapshot.pickle")
    return Section("PyTorch memory visualizer",
                   ["memory-snapshot.pickle holds the run's trace and final segments in PyTorch's snapshot "
                    "structure: drop it on pytorch.org/memory_viz (\"Active Memory Timeline\", \"Allocator "
                    "State History\")."],
                   links=[("memory-snapshot.pickle", pickle_path), ("memory-snapshot.json", folder.snapshot_path)])


def training_section(folder: ResultFolder, out: pathlib.Path) -> Section:
    s = Section("Training runs (trainmem train)")
    rows = []
    for name, run in folder.train_runs.items():
        steps, memory = run["steps"], run["memory"]
        rows.append([name, str(len(steps)), f"{steps[0]['loss']:.4f}", f"{steps[-1]['loss']:.4f}",
                     fmt_bytes(memory.get("peak_allocated_bytes")), fmt_bytes(memory.get("peak_reserved_bytes"))])
    s.tables.append(Table(["run", "steps", "first loss", "last loss", "peak allocated", "peak reserved"], rows))
    losses = {name[len("precision-"):]: [(st["step"], st["loss"]) for st in run["steps"]]
              for name, run in folder.train_runs.items() if name.startswith("precision-")}
    if losses:
        s.figures.append(Figure(plots.loss_curves(losses, "loss by precision (tiny)", out / "precision-loss.png"),
                                "Training loss per step for each precision: 16-bit should track fp32."))
    return s


def _guarded(doc: Document, what: str, build, *a) -> None:
    """Adds the section `build` makes; a section that cannot be drawn from these results becomes a
    line in doc.missing (this is the boundary where a partial folder must not stop the report)."""
    try:
        doc.sections.append(build(*a))
    except OutputError:  # the report cannot be written: that stops it (__main__ says why)
        raise
    except Exception as e:  # noqa: BLE001 - reported, not swallowed: it lands in the "missing" list
        doc.missing.append(f"{what}: could not be drawn ({type(e).__name__}: {e})")


def build(folder: ResultFolder, out: pathlib.Path) -> Document:
    plots_dir = out / "plots"
    doc = Document(f"trainmem report: {folder.device_name()}",
                   [f"Results folder: {folder.path.name}. Memory figures are properties of the allocation "
                    "sequence and the allocator policy (identical on every device for the same run); times "
                    "are this device's."])
    doc.notice += run_notice(folder)
    doc.missing += folder.problems
    claims = claims_mod.evaluate(folder)
    _guarded(doc, "device", lambda: Section("Device", tables=[Table(["", ""], device_rows(folder))]))
    doc.sections.append(Section("The guides' claims", ["Each verdict is computed from the numbers by its criterion."],
                                tables=[claims_table(claims)]))
    _guarded(doc, "techniques side by side", summary_section, folder)
    if folder.trace is not None:
        _guarded(doc, "memory timeline", timeline_section, folder, plots_dir)
    else:
        doc.missing.append("memory-trace.json: missing (run `trainmem train --record-memory`): no memory timeline")
    if folder.snapshot_path is not None:
        _guarded(doc, "memory snapshot", snapshot_section, folder, out)
    else:
        doc.missing.append("memory-snapshot.json: missing (run `trainmem train --memory-snapshot`): no pickle")
    ordered = suites_of(folder)  # the build's catalog, in the order ci/suite ran them
    known = {s.bench for s in ordered}
    extra = [suite_for(b) for b in folder.benchmarks if b not in known]
    for suite in ordered + extra:
        if folder.runs(suite.bench):
            _guarded(doc, suite.bench, suite_section, folder, suite, claims, plots_dir)
        elif suite.bench not in folder.benchmarks:
            doc.missing.append(f"{suite.bench}.json: not in this folder (suite not built or not run)")
    for label, comparison in folder.peers.items():  # none: no section and nothing missing (PyTorch is optional)
        _guarded(doc, f"peer-torch-{label}.json", peer_section, label, comparison)
    if folder.train_runs:
        _guarded(doc, "training runs", training_section, folder, plots_dir)
    else:
        doc.missing.append("train-*.json: no `trainmem train --json` runs: no loss curves, no attention-vs-T runs")
    return doc
