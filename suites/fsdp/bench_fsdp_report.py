"""How the report (reports/trainmem_report) presents bench_fsdp: per-unit sharding, unit size and
prefetch, the peaks against fsdp_memory.h's formula, and the claim it tests."""
from __future__ import annotations

import pathlib

from reports.trainmem_report import plots
from reports.trainmem_report.claims import Claim, claim, verdict
from reports.trainmem_report.document import MiB, Figure, fmt_bytes
from reports.trainmem_report.presentation import MEMORY_COLUMNS, Suite, measured_and_formula
from reports.trainmem_report.report import slug
from reports.trainmem_report.results import Benchmark, ResultFolder
from reports.trainmem_report.result_schema import PEAK_ALLOCATED, category_peak_counter


def fsdp_layers_per_unit(setting_unit: str) -> int:
    """--fsdp-unit as bench_fsdp names it: "layer" -> 1, "2-layers" -> 2."""
    return 1 if setting_unit == "layer" else int(setting_unit.split("-")[0])


def fsdp_full_shard_runs(f: ResultFolder) -> dict[tuple[int, int, bool], Benchmark]:
    """(world size, layers per unit, prefetch) -> the FULL_SHARD run. Names:
    BM_Fsdp/<model>/<full|grad_op|none>/<layer|K-layers>/<prefetch|no_prefetch>."""
    runs = {}
    for b in f.runs(SUITE.bench):
        parts = b.name.split("/")
        if len(parts) >= 5 and parts[2] == "full":
            runs[(b.world_size, fsdp_layers_per_unit(parts[3]), parts[4] == "prefetch")] = b
    return runs


def fsdp_figures(folder: ResultFolder, suite: Suite, out: pathlib.Path) -> list[Figure]:
    """FULL_SHARD's parameters peak and peak allocated against the unit size (layers per unit), a
    line per world size and prefetch setting."""
    runs = fsdp_full_shard_runs(folder)
    if not runs:
        return []
    figures = []
    for counter, what in ((category_peak_counter("parameters"), "parameters peak"), (PEAK_ALLOCATED, "peak allocated")):
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


# BM_Fsdp/<model>/<mode>/<unit>/<prefetch|no_prefetch>; the world size is the file's (its context).
SUITE = Suite(
    "fsdp", "FSDP", "bench_fsdp", "per-unit sharding, unit size and prefetch",
    group=lambda b: f"{b.name.split('/')[1]} N={b.world_size}",
    setting=lambda b: " ".join(b.name.split("/")[2:]),
    columns=MEMORY_COLUMNS + [(category_peak_counter("parameters"), "parameters peak", "bytes"),
                              (category_peak_counter("gradients"), "gradients peak", "bytes"),
                              ("gathered_units_at_peak", "gathered units at peak", "number"),
                              ("comm_volume_bytes_per_step", "comm volume / step", "bytes")],
    details=[("Peaks against the formula P_s + F_root + gathered layer units (suites/fsdp/fsdp_memory.h)",
              "BM_Fsdp/",
              measured_and_formula([(category_peak_counter("parameters"), "parameters peak"),
                                    (category_peak_counter("gradients"), "gradients peak")]) +
              [("gathered_units_at_peak", "layer units gathered at peak", "number")])],
    order=9, technique_order=9,
    figures=fsdp_figures)


@claim("FSDP's peak is the shard plus the gathered units (one unit at a time, two with prefetch)", SUITE,
       "FULL_SHARD, every world size and unit size: parameters peak = shard + root + gathered layer units "
       "(fsdp_memory.h) to the byte, with 1 layer unit gathered at the peak without prefetch and 2 with it "
       "(1 when the whole stack is one unit)")
def fsdp_peak_is_shard_plus_units(f: ResultFolder, c: Claim) -> None:
    runs = fsdp_full_shard_runs(f)
    oks, parts = [], []
    for (n, k, prefetch), b in sorted(runs.items()):
        measured, predicted = b.counter(category_peak_counter("parameters")), b.counter("predicted_parameters_peak_bytes")
        units = b.counter("gathered_units_at_peak")
        alone = runs.get((n, k, not prefetch))
        one_unit = alone is not None and alone.counter(category_peak_counter("parameters")) == measured  # nothing to prefetch
        expected_units = 2 if prefetch and not one_unit else 1
        oks.append(measured == predicted and units == expected_units)
        c.numbers[f"N={n} {k}-layer units {'prefetch' if prefetch else 'no prefetch'} gathered"] = units
        # The split measured: with equal units, peak(off) = base + F and peak(on) = base + 2F, so
        # F = on - off and base (shard + root) = 2 off - on.
        if prefetch and alone is not None and not one_unit:
            unit, base = measured - alone.counter(category_peak_counter("parameters")), 2 * alone.counter(category_peak_counter("parameters")) - measured
            parts.append(f"N = {n}, {k}-layer units: {fmt_bytes(alone.counter(category_peak_counter('parameters')))} = "
                         f"{fmt_bytes(base)} + 1 x {fmt_bytes(unit)}, with prefetch {fmt_bytes(measured)} = "
                         f"{fmt_bytes(base)} + 2 x {fmt_bytes(unit)}")
    if oks:
        c.verdict = verdict(all(oks))
        exact = sum(b.counter(category_peak_counter("parameters")) == b.counter("predicted_parameters_peak_bytes")
                    for b in runs.values())
        c.measured = f"{exact} of {len(runs)} runs equal to the formula to the byte" + \
            ("; " + "; ".join(parts) if parts else "")
