"""Several results folders (one per machine) -> one Document with each suite's table and plots
side by side per device, the claims' verdicts per device, and the settings where the ranking of
techniques differs between devices.

Rankings are compared within a group (a model, a shape). Devices often measure different groups
(a GPU runs gpt2-124m where the CPU runs `small`); groups with the same name are compared
first, and otherwise the n-th group of a suite on one device with the n-th group that has the
same settings on the other, and the table says which groups were paired.
"""
from __future__ import annotations

import os
import pathlib

from . import claims as claims_mod
from . import plots
from .document import Document, Figure, Section, Table, fmt_bytes, fmt_ms
from .errors import OutputError
from .report import grouped, slug, suite_figures
from .result_schema import PEAK_ALLOCATED
from .results import ResultFolder
from .suites import Suite, presentations

# The metrics whose rankings are compared: (name, value of a benchmark, lower is better).
RANKED = [("time", lambda b: b.real_time_ms), ("peak allocated", lambda b: b.counter(PEAK_ALLOCATED))]


def device_table(folders: list[ResultFolder]) -> Table:
    rows = []
    for f, name in zip(folders, folder_names(folders)):
        d = f.device
        memory = d.get("total_memory_bytes") if d.get("kind") == "cuda" else d.get("device_memory_bytes")
        rows.append([name, f.device_name(), str(d.get("kind", "?")), fmt_bytes(memory),
                     str(d.get("driver_version") or "-"), str(d.get("runtime_version") or "-"),
                     str(d.get("cudnn_version") or "-")])
    return Table(["results", "device", "kind", "memory (CPU: budget)", "driver", "CUDA runtime", "cuDNN"], rows)


def claims_side_by_side(folders: list[ResultFolder]) -> Table:
    per_device = [claims_mod.evaluate(f) for f in folders]
    rows = []
    for i, claim in enumerate(per_device[0]):
        verdicts = [claims[i].verdict for claims in per_device]
        measured = {v for v in verdicts if v != claims_mod.NOT_MEASURED}
        flag = "differs" if len(measured) > 1 else ""
        rows.append([claim.claim] + [f"{c[i].verdict}: {c[i].measured or '-'}" for c in per_device] + [flag])
    return Table(["claim"] + labels(folders) + ["between devices"], rows)


# Two settings swap places between devices only if each device puts them apart by more than this
# (relative): closer than that, the order is noise (times on a loaded machine vary by several %).
MARGIN = 0.05


def ranking(runs: list, metric) -> list[str]:
    """Settings ordered best (lowest) first; settings without the metric are left out."""
    valued = [(metric(b), setting) for setting, b in runs if metric(b) is not None]
    return [setting for _, setting in sorted(valued)]


# The most settings of a group whose rankings are compared: every pair of settings is compared, so
# the time grows with the square of the count; a group with more is listed as not compared.
MAX_RANKED = 200


def swapped_pairs(runs_a: list, runs_b: list, metric) -> list[tuple[str, str]]:
    """Pairs (x, y) with x clearly better than y on device a and y clearly better than x on b."""
    a = {s: metric(b) for s, b in runs_a if metric(b) is not None}
    b = {s: metric(r) for s, r in runs_b if metric(r) is not None}
    common = [s for s in a if s in b]
    better = lambda v, x, y: v[x] * (1 + MARGIN) < v[y]
    return [(x, y) for x in common for y in common if better(a, x, y) and better(b, y, x)]


def folder_names(folders: list[ResultFolder]) -> list[str]:
    """Each folder's name, unique among `folders`: the shortest end of its path that no other
    folder's path ends with ("same" alone, "a/same" beside "b/same"), and its position on the
    command line where even the whole path is another's (the same folder given twice: "same #2")."""
    paths = [pathlib.Path(os.path.abspath(f.path)).parts for f in folders]
    names = []
    for i, path in enumerate(paths):
        others = [p for j, p in enumerate(paths) if j != i]
        tail = next((path[-k:] for k in range(1, len(path) + 1) if all(p[-k:] != path[-k:] for p in others)), None)
        names.append("/".join(tail).lstrip("/") if tail else f"{folders[i].name} #{i + 1}")
    return names


def labels(folders: list[ResultFolder]) -> list[str]:
    """Each folder's device name, unique among `folders`: with the folder's name where two devices
    share a name."""
    names = [f.device_name() for f in folders]
    return [n if names.count(n) == 1 else f"{n} ({folder})" for n, folder in zip(names, folder_names(folders))]


def paired_groups(a: dict[str, list], b: dict[str, list]) -> list[tuple[str, str]]:
    """Groups of device a paired with groups of device b: same name, else same settings in order."""
    pairs = [(g, g) for g in a if g in b]
    rest_a = [g for g in a if g not in b]
    rest_b = [g for g in b if g not in a]
    for ga in rest_a:
        settings = {s for s, _ in a[ga]}
        match = next((gb for gb in rest_b if {s for s, _ in b[gb]} == settings), None)
        if match:
            pairs.append((ga, match))
            rest_b.remove(match)
    return pairs


def ranking_differences(folders: list[ResultFolder], suite: Suite) -> list[list[str]]:
    """Rows (suite, group, metric, ranking on the first device, on the other, swapped pairs) for
    every group whose settings swap places, beyond MARGIN, between the first device and another."""
    rows = []
    names = labels(folders)
    base_groups = grouped(folders[0], suite)
    for other, other_name in zip(folders[1:], names[1:]):
        other_groups = grouped(other, suite)
        for ga, gb in paired_groups(base_groups, other_groups):
            count = max(len(base_groups[ga]), len(other_groups[gb]))
            if count > MAX_RANKED:
                rows.append([suite.title, ga if ga == gb else f"{ga} / {gb}", "not compared", "-", "-",
                             f"{count} settings, more than the {MAX_RANKED} whose rankings are compared"])
                continue
            for name, metric in RANKED:
                if name == "time" and not suite.rank_by_time:
                    continue
                swaps = swapped_pairs(base_groups[ga], other_groups[gb], metric)
                if swaps:
                    common = {s for s, _ in base_groups[ga]} & {s for s, _ in other_groups[gb]}
                    ra = [s for s in ranking(base_groups[ga], metric) if s in common]
                    rb = [s for s in ranking(other_groups[gb], metric) if s in common]
                    rows.append([suite.title, ga if ga == gb else f"{ga} / {gb}", name,
                                 f"{names[0]}: {' < '.join(ra)}", f"{other_name}: {' < '.join(rb)}",
                                 ", ".join(f"{x} / {y}" for x, y in swaps)])
    return rows


def suite_table(folders: list[ResultFolder], suite: Suite) -> Table:
    """One row per (group, setting); per device its time and peak allocated."""
    keys: dict[tuple[str, str], None] = {}  # in order of first appearance (a dict: no quadratic search)
    values: dict[tuple[str, str, int], object] = {}
    for i, f in enumerate(folders):
        for group, runs in grouped(f, suite).items():
            for setting, b in runs:
                keys.setdefault((group, setting))
                values[(group, setting, i)] = b
    rows = []
    for group, setting in keys:
        row = [group, setting]
        for i in range(len(folders)):
            b = values.get((group, setting, i))
            row += [fmt_ms(b.real_time_ms), fmt_bytes(b.counter(PEAK_ALLOCATED))] if b else ["-", "-"]
        rows.append(row)
    columns = ["group", "setting"]
    for name in labels(folders):
        columns += [f"{name}: time", f"{name}: peak allocated"]
    return Table(columns, rows, caption=f"{suite.bench}.json per device")


def time_bars(folders: list[ResultFolder], suite: Suite, out: pathlib.Path) -> list[Figure]:
    """Time per setting, one bar per device, for each group the first device ran."""
    figures = []
    for group, runs in grouped(folders[0], suite).items():
        settings = [s for s, _ in runs]
        values = {}
        for f, name in zip(folders, labels(folders)):
            theirs = dict(grouped(f, suite).get(group, []))
            values[name] = [theirs[s].real_time_ms if s in theirs else None for s in settings]
        if sum(any(v is not None for v in ys) for ys in values.values()) >= 2:
            path = plots.device_bars(settings, values, f"{suite.title}: {group}", "ms per iteration",
                                     out / f"{suite.key}-time-{slug(group)}.png")
            figures.append(Figure(path, f"{suite.title}, {group}: time per iteration on each device."))
    return figures


def suite_section(folders: list[ResultFolder], suite: Suite, out: pathlib.Path) -> Section:
    s = Section(f"{suite.title} ({suite.bench})", suite.paragraphs(), figures_per_row=len(folders))
    s.tables.append(suite_table(folders, suite))
    # each device's own plots, side by side, in a folder of its own: its position on the command
    # line keeps two folders' plots apart even where their names are alike ("a/same", "a-same")
    for i, (f, name, folder) in enumerate(zip(folders, labels(folders), folder_names(folders))):
        mine = out / f"{i + 1}-{slug(folder)}"
        s.figures += [Figure(fig.path, f"{name}: {fig.caption}") for fig in suite_figures(f, suite, mine,
                                                                                           s.paragraphs)]
    try:
        s.figures += time_bars(folders, suite, out)
    except plots.TooManyToDraw as e:
        s.paragraphs.append(f"{suite.title}, time per device: {e}")
    return s


def build(folders: list[ResultFolder], out: pathlib.Path) -> Document:
    plots_dir = out / "plots"
    doc = Document("trainmem report: " + " vs ".join(labels(folders)),
                   ["Results side by side, one column per device. Memory is the same wherever the same "
                    "configuration ran; times and TFLOP/s are each device's own."])
    names = folder_names(folders)
    for f, name in zip(folders, names):
        doc.missing += [f"{name}: {p}" for p in f.problems]
    doc.sections.append(Section("Devices", tables=[device_table(folders)]))
    doc.sections.append(Section("The guides' claims on each device", tables=[claims_side_by_side(folders)]))
    differences = []
    for suite in presentations():  # in their own order (Suite.order)
        present = [f for f in folders if f.runs(suite.bench)]
        for f, name in zip(folders, names):
            if f not in present:
                doc.missing.append(f"{name}: {suite.bench}.json not run")
        if present:
            try:
                doc.sections.append(suite_section(folders, suite, plots_dir))
                differences += ranking_differences(present, suite) if len(present) >= 2 else []
            except OutputError:  # the report cannot be written: that stops it (__main__ says why)
                raise
            except Exception as e:  # noqa: BLE001 - a malformed suite is listed as missing, the rest is drawn
                doc.missing.append(f"{suite.bench}: could not be compared ({type(e).__name__}: {e})")
    doc.sections.insert(2, Section(
        "Where the ranking of techniques differs between devices",
        [f"Settings ordered best first (lowest time or peak allocated) within each group; a group is listed "
         f"when two settings swap places and each device puts them more than {MARGIN:.0%} apart."
         if differences else "Nowhere: every group ranks its settings the same way on every device."],
        tables=[Table(["suite", "group", "by", "ranking on the first device", "ranking on the other",
                       "swapped (each device > 5% apart)"], differences)]
        if differences else []))
    return doc
