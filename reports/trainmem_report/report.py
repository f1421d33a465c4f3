"""One results folder -> the report Document (sections with tables, figures and claims), and the
PNG plots it shows. markdown.py and html.py write it out.
"""
from __future__ import annotations

import pathlib
import re

from . import claims as claims_mod
from . import noise, plots
from .document import FORMATTERS, Document, Figure, Section, Table, fmt_bytes, fmt_ms, fmt_spread
from .errors import OutputError
from .peer_speed import speed_section
from .peers import peer_section
from .results import Benchmark, ResultFolder, finite_number, not_a_number
from .snapshot import snapshot_to_pickle
from .suites import Suite, presentations, safe_split, suite_for, suites_of
from .timeline import CATEGORIES, step_timeline
from .result_schema import PEAK_ALLOCATED, PEAK_RESERVED, category_peak_counter


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
        if isinstance(d.get("cpu_gemm"), str) and d["cpu_gemm"]:  # results before issue 41 lack it
            rows.append(["GEMM", f"{d['cpu_gemm']} ({d.get('cpu_gemm_kernels', '?')})"])
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
        bars = [(setting, {c: b.counter(category_peak_counter(c), 0) for c in CATEGORIES}, b.counter(PEAK_ALLOCATED))
                for setting, b in runs]
        if any(sum(cats.values()) for _, cats, _ in bars):
            path = plots.category_bars(bars, f"{suite.title}: {group}", out / f"{suite.key}-categories-{slug(group)}.png")
            figures.append(Figure(path, f"{suite.title}, {group}: each category's peak per setting "
                                        "(black: peak allocated)."))
    return figures


def tradeoff_figure(folder: ResultFolder, suite: Suite, out: pathlib.Path) -> list[Figure]:
    if suite.tradeoff is None:
        return []
    counter, ylabel = suite.tradeoff
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


def suite_figures(folder: ResultFolder, suite: Suite, out: pathlib.Path, notes: list[str]) -> list[Figure]:
    """Every plot of one suite: category bars, the trade-off curve, and the suite's own scaling plots.
    Plots with more to show than one can (plots.TooManyToDraw) are left out, each with a line in `notes`."""
    makers = [("category bars", lambda: category_figures(folder, suite, out)),
              ("memory vs time", lambda: tradeoff_figure(folder, suite, out))]
    if suite.figures is not None:
        makers.append(("scaling plots", lambda: suite.figures(folder, suite, out)))
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


# The techniques side by side on one model: each technique's settings against one baseline
# measurement, the run of the suite that gives Suite.summary_reference (the plain step of this
# preset). A suite takes part with its own setting without the technique (Suite.summary_baseline): a
# group of the suite is on the same model and batch when that setting's peak allocated equals the
# baseline's to the byte (memory is exact), so no name or label is trusted for it.
def summary_section(folder: ResultFolder) -> Section:
    reference = next((s for s in presentations() if s.summary_reference), None)
    if reference is None:
        raise ValueError("no suite's presentation names the run to measure against (Suite.summary_reference)")
    base = next((b for b in folder.runs(reference.bench) if b.name == reference.summary_reference), None)
    if base is None:
        raise ValueError(f"{reference.bench}.json has no {reference.summary_reference}: nothing to measure against")
    base_peak = base.counter(PEAK_ALLOCATED)
    rows, elsewhere = [], []
    techniques = sorted((s for s in presentations() if s.summary_baseline), key=lambda s: s.technique_order)
    for suite in techniques:
        for group, runs in grouped(folder, suite).items():
            own = dict(runs).get(suite.summary_baseline)
            if own is None or own.counter(PEAK_ALLOCATED) != base_peak:
                elsewhere.append(f"{suite.title} ({group})")
                continue
            for setting, b in runs:
                if b is own:
                    continue
                peak = b.counter(PEAK_ALLOCATED)
                rows.append([suite.title, setting, fmt_bytes(peak), f"{100 * (1 - peak / base_peak):+.1f}%",
                             f"{fmt_ms(b.real_time_ms)} {fmt_spread(b.time_stddev_ms, b.repetitions)}",
                             f"{100 * (b.real_time_ms / base.real_time_ms - 1):+.1f}%", noise.ordering(b, base)])
    paragraphs = [f"Every technique on one model against one baseline: {reference.summary_reference} ({base.label}), "
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
    if suite.tables is not None:
        s.tables += suite.tables(folder, suite)
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


def _losses(file: str, steps: list, problems: list[str]) -> list[float | None]:
    """Each step's loss, None where it is not a number (`trainmem train --json` writes a NaN or infinite
    loss as null); those are named in `problems` once per run: the first, and how many more."""
    losses = [finite_number(st.get("loss")) if isinstance(st, dict) else None for st in steps]
    bad = [i for i, loss in enumerate(losses) if loss is None]
    if bad:
        first = steps[bad[0]]
        if not isinstance(first, dict):
            what = f"steps[{bad[0]}] is not an object"
        else:
            what = f"steps[{bad[0]}].loss is " + ("missing" if "loss" not in first else not_a_number(first["loss"]))
        more = f" (and {len(bad) - 1} more of its {len(steps)} steps)" if len(bad) > 1 else ""
        problems.append(f"{file}: {what}{more}: left out")
    return losses


def _peak(file: str, memory: dict, key: str, problems: list[str]) -> float | None:
    """memory[key] as a number; None if absent, or if not a number, named in `problems`."""
    peak = finite_number(memory.get(key))
    if peak is None and memory.get(key) is not None:
        problems.append(f"{file}: memory.{key} is {not_a_number(memory[key])}: left out")
    return peak


def training_section(folder: ResultFolder, out: pathlib.Path, problems: list[str]) -> Section:
    """A row per run and the loss curves per precision. A value that is not a number is named in
    `problems` and shown as "-" (left out of its curve): the rest of its run, and every other run, is shown."""
    s = Section("Training runs (trainmem train)")
    rows, curves = [], {}
    for name, run in folder.train_runs.items():
        file, steps = f"train-{name}.json", run["steps"]
        losses = _losses(file, steps, problems)
        first_last = [losses[0], losses[-1]] if losses else [None, None]
        rows.append([name, str(len(steps))] + ["-" if loss is None else f"{loss:.4f}" for loss in first_last] +
                    [fmt_bytes(_peak(file, run["memory"], key, problems)) for key in (PEAK_ALLOCATED, PEAK_RESERVED)])
        if name.startswith("precision-"):  # the n-th entry of "steps" is step n
            curves[name[len("precision-"):]] = [(n, loss) for n, loss in enumerate(losses, 1) if loss is not None]
    s.tables.append(Table(["run", "steps", "first loss", "last loss", "peak allocated", "peak reserved"], rows))
    if curves:
        s.figures.append(Figure(plots.loss_curves(curves, "loss by precision (tiny)", out / "precision-loss.png"),
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
    if folder.peer_speeds:  # none: no section and nothing missing (PyTorch is optional)
        _guarded(doc, "peer-speed files", speed_section, folder.peer_speeds)
    if folder.train_runs:
        _guarded(doc, "training runs", training_section, folder, plots_dir, doc.missing)
    else:
        doc.missing.append("train-*.json: no `trainmem train --json` runs: no loss curves, no attention-vs-T runs")
    return doc
