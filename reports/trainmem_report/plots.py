"""The report's plots, one function each. Every function takes plain numbers (no result files),
writes one PNG and returns its path. matplotlib runs headless (Agg): no display, no network.
"""
from __future__ import annotations

import pathlib
import textwrap
import zlib
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import matplotlib.ticker  # noqa: E402

from .output_file import make_folder, write_file  # noqa: E402
from .result_schema import CATEGORIES  # noqa: E402
from .timeline import Timeline  # noqa: E402

MiB = 1024.0 * 1024.0
CATEGORY_COLORS = dict(zip(CATEGORIES, ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860",
                                        "#da8bc3", "#8c8c8c"]))
PHASE_COLORS = {"forward": "#e8f0fb", "backward": "#fbeee6", "optimizer": "#eaf5ea", "zero_grad": "#f3eaf7"}

# One colour per method, the same in every plot: a recompute policy, a precision, an attention
# implementation, a way of holding gradients, a loader, an allocator mode, a ZeRO stage. Each
# suite's baseline (none, fp32, persistent, eager, naive ...) is grey-blue. A name not listed gets a
# colour from its text (the same in every run: a CRC, not Python's salted hash).
_PALETTE = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974",
            "#64b5cd"]
METHOD_COLORS = {
    "none": _PALETTE[0], "selective": _PALETTE[1], "every:2": _PALETTE[2], "full": _PALETTE[3], "sqrt": _PALETTE[4],
    "fp32": _PALETTE[0], "bf16": _PALETTE[1], "fp16": _PALETTE[2],
    "naive": _PALETTE[0], "flash": _PALETTE[2], "cudnn": _PALETTE[4],
    "persistent": _PALETTE[0], "on-demand": _PALETTE[1], "in-backward": _PALETTE[2],
    "eager": _PALETTE[0], "lazy": _PALETTE[2], "sequential": _PALETTE[5], "lazy_unpinned": _PALETTE[6],
    "hit/fixed": _PALETTE[2], "miss/fixed": _PALETTE[1], "raw": _PALETTE[3], "hit/expandable": _PALETTE[8],
    "miss/expandable": _PALETTE[6],
    "stage 0": _PALETTE[0], "stage 1": _PALETTE[1], "stage 2": _PALETTE[2], "stage 3": _PALETTE[3],
}
# Line styles for lines that can lie on each other (loss curves): the n-th line of a plot.
LINE_STYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P", "X"]


def method_of(series: str) -> str:
    """The method a series or setting name shows: "flash D=64" -> "flash", "naive_cpu D=64" -> "naive",
    "stage 3 offload optimizer" -> "stage 3"."""
    if series in METHOD_COLORS:
        return series
    for n in (2, 1):
        head = " ".join(series.split()[:n])
        if head in METHOD_COLORS:
            return head
        if head.split("_")[0] in METHOD_COLORS:
            return head.split("_")[0]
    return series


def color_of(series: str) -> str:
    """The colour of a series or setting: its method's (METHOD_COLORS), else one from its name."""
    method = method_of(series)
    return METHOD_COLORS.get(method) or _PALETTE[zlib.crc32(method.encode()) % len(_PALETTE)]


class PlainLogFormatter(matplotlib.ticker.LogFormatter):
    """matplotlib's choice of which log-axis ticks to label (every decade; the minor ticks too when
    the axis spans few decades), each label a plain number: "4", "0.5", "128", never "4×10⁰"."""
    def __call__(self, x, pos=None):
        return f"{x:g}" if super().__call__(x, pos) else ""


def plain_ticks(axis) -> None:
    """Plain-number tick labels on a log axis, major and minor (PlainLogFormatter)."""
    axis.set_major_formatter(PlainLogFormatter())
    axis.set_minor_formatter(PlainLogFormatter(minor_thresholds=(2, 0.5)))


# The most bars, labelled points, lines or ticks one plot draws. Past that a plot is unreadable,
# and its labels take minutes to lay out (1,000 bars took 65 s), so the report's time would grow
# with what a result file holds.
MAX_DRAWN = 60


class TooManyToDraw(ValueError):
    """A plot with more than MAX_DRAWN things to label: not drawn (its table has every number)."""


def _check_count(n: int, what: str) -> None:
    if n > MAX_DRAWN:
        raise TooManyToDraw(f"{n} {what}, more than the {MAX_DRAWN} a plot can show: not drawn")


def _save(fig, path: pathlib.Path) -> pathlib.Path:
    try:
        make_folder(path.parent)
        fig.tight_layout()
        return write_file(path, lambda p: fig.savefig(p, dpi=100))
    finally:
        plt.close(fig)


def category_bars(bars: list[tuple[str, dict[str, float], float | None]], title: str,
                  path: pathlib.Path) -> pathlib.Path:
    """One stacked bar per setting: each category's peak (MiB); a black tick marks the peak
    allocated bytes (the categories peak at different moments, so the stack can exceed it)."""
    _check_count(len(bars), "settings")
    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(bars) + 2), 4))
    xs = range(len(bars))
    bottom = [0.0] * len(bars)
    for c in CATEGORIES:
        heights = [cats.get(c, 0.0) / MiB for _, cats, _ in bars]
        if any(heights):
            ax.bar(xs, heights, bottom=bottom, color=CATEGORY_COLORS[c], label=c)
            bottom = [b + h for b, h in zip(bottom, heights)]
    peaks = [(x, p / MiB) for x, (_, _, p) in zip(xs, bars) if p]
    if peaks:
        ax.scatter([x for x, _ in peaks], [p for _, p in peaks], marker="_", s=400, color="black",
                   zorder=3, label="peak allocated")
    ax.set_xticks(list(xs), [s for s, _, _ in bars], rotation=30, ha="right")
    ax.set_ylabel("MiB (per-category peaks)")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)


@dataclass
class TradeoffPoint:
    setting: str
    time_ms: float
    memory_bytes: float
    spread_ms: float      # the time's standard deviation over the repetitions (0: not known)
    on_front: bool        # no other setting beats it in memory while being faster beyond the noise


def tradeoff_figure(series: dict[str, list[TradeoffPoint]], title: str, xlabel: str, ylabel: str):
    """Memory (MiB, y) against time (x): a point per setting in its method's colour, labelled, with
    its spread as a horizontal bar; a marker per group; per group a dashed line joins its front
    (the points marked on_front), in order of memory."""
    _check_count(sum(len(points) for points in series.values()), "labelled points")
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for (name, points), marker in zip(series.items(), MARKERS * (1 + len(series) // len(MARKERS))):
        for p in points:
            ax.errorbar([p.time_ms], [p.memory_bytes / MiB], xerr=[p.spread_ms] if p.spread_ms else None,
                        marker=marker, linestyle="none", color=color_of(p.setting), capsize=3)
            ax.annotate(p.setting, (p.time_ms, p.memory_bytes / MiB), fontsize=7, xytext=(4, 3),
                        textcoords="offset points")
        front = sorted((p for p in points if p.on_front), key=lambda p: -p.memory_bytes)
        ax.plot([p.time_ms for p in front], [p.memory_bytes / MiB for p in front], linestyle="--", color="#555555",
                marker=marker, markerfacecolor="none", label=f"{name} (front dashed)")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def tradeoff(series: dict[str, list[TradeoffPoint]], title: str, xlabel: str, ylabel: str,
             path: pathlib.Path) -> pathlib.Path:
    return _save(tradeoff_figure(series, title, xlabel, ylabel), path)


def lines(series: dict[str, list[tuple[float, float]]], title: str, xlabel: str, ylabel: str,
          path: pathlib.Path, logx: bool = False, logy: bool = False,
          dashed: dict[str, str] | None = None, xtick_label=lambda x: f"{x:g}") -> pathlib.Path:
    return _save(lines_figure(series, title, xlabel, ylabel, logx, logy, dashed, xtick_label), path)


def lines_figure(series: dict[str, list[tuple[float, float]]], title: str, xlabel: str, ylabel: str,
                 logx: bool = False, logy: bool = False, dashed: dict[str, str] | None = None,
                 xtick_label=lambda x: f"{x:g}"):
    """A line per series (scaling plots: memory or TFLOP/s vs sequence length or world size).
    `dashed` maps a series to the series whose colour it takes, drawn dashed with crosses: a
    formula next to the measurement it predicts. With `logx`, the ticks are the x values measured,
    labelled by `xtick_label`."""
    _check_count(len(series), "lines")
    _check_count(len({p[0] for points in series.values() for p in points}), "x values")
    dashed = dashed or {}
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, points in sorted(series.items(), key=lambda item: item[0] in dashed):  # measured first
        points = sorted(points)
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        if name in dashed:
            ax.plot(xs, ys, linestyle="--", linewidth=1, marker="x", color=color_of(dashed[name]), label=name)
        else:
            ax.plot(xs, ys, marker="o", color=color_of(name), label=name)
    if logx:
        ax.set_xscale("log", base=2)
        xs = sorted({p[0] for points in series.values() for p in points})
        ax.set_xticks(xs, [xtick_label(x) for x in xs])  # 64, 128, ... rather than 2^6, 2^7
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    if logy:
        ax.set_yscale("log")
        plain_ticks(ax.yaxis)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    if len(series) > 5:  # a long legend goes beside the plot, not over the lines
        fig.set_size_inches(9, 4.2)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    else:
        ax.legend(fontsize=7)
    return fig


def memory_timeline(t: Timeline, title: str, path: pathlib.Path) -> pathlib.Path:
    """Allocated bytes by category over one step's events (stacked), reserved bytes dashed, and
    the forward / backward / optimizer phases shaded."""
    fig, ax = plt.subplots(figsize=(9, 4.2))
    for phase, first, last in t.phases:
        ax.axvspan(first - 0.5, last + 0.5, color=PHASE_COLORS.get(phase, "#f4f4f4"), zorder=0)
        ax.text((first + last) / 2, 1.0, phase, transform=ax.get_xaxis_transform(), ha="center",
                va="bottom", fontsize=8)
    names = list(t.by_category)
    ax.stackplot(t.x, [[v / MiB for v in t.by_category[c]] for c in names], labels=names,
                 colors=[CATEGORY_COLORS.get(c, "#999999") for c in names], step="post", zorder=2)
    ax.plot(t.x, [r / MiB for r in t.reserved], color="black", linestyle="--", linewidth=1,
            label="reserved", drawstyle="steps-post", zorder=3)
    ax.set_xlabel(f"allocator event in step {t.step}")
    ax.set_ylabel("MiB")
    ax.set_title(title, pad=16)
    ax.set_xlim(-0.5, len(t.x) - 0.5)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)


def loss_curves(series: dict[str, list[tuple[int, float]]], title: str, path: pathlib.Path) -> pathlib.Path:
    return _save(loss_curves_figure(series, title), path)


def loss_curves_figure(series: dict[str, list[tuple[int, float]]], title: str):
    """A line per run, each in its method's colour with its own line style and markers (about ten
    per line, offset between lines), so that curves lying on each other can still be told apart."""
    _check_count(len(series), "lines")
    fig, ax = plt.subplots(figsize=(6.5, 4.0))
    for i, (name, points) in enumerate(series.items()):
        every = max(1, len(points) // 10)
        ax.plot([p[0] for p in points], [p[1] for p in points], label=name, linewidth=1.2, color=color_of(name),
                linestyle=LINE_STYLES[i % len(LINE_STYLES)], marker=MARKERS[i % len(MARKERS)], markersize=4,
                markevery=(i * every // max(1, len(series)), every))
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def device_bars(settings: list[str], values: dict[str, list[float | None]], title: str, ylabel: str,
                path: pathlib.Path) -> pathlib.Path:
    """Side by side per device: one bar per (setting, device); `values` maps device -> per setting."""
    return grouped_bars(settings, values, title, ylabel, path)


def grouped_bars(settings: list[str], values: dict[str, list[float | None]], title: str, ylabel: str,
                 path: pathlib.Path) -> pathlib.Path:
    """One bar per (setting, series), the series of a setting side by side; `values` maps a series
    (a device, or a quantity such as "peak reserved") to its value per setting (None: no bar)."""
    _check_count(len(settings) * max(1, len(values)), "bars")
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(settings) * max(1, len(values)) + 2), 4))
    width = 0.8 / max(1, len(values))
    for i, (series, ys) in enumerate(values.items()):
        xs = [j + i * width for j, y in enumerate(ys) if y is not None]
        ax.bar(xs, [y for y in ys if y is not None], width=width, label=series)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(settings))], settings, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    return _save(fig, path)


GiB = 1024.0 * MiB


def plain_text(text: str) -> str:
    """`text` shown as written in a plot: a "$" would start matplotlib's mathtext (and a lone one
    fail the plot)."""
    return text.replace("$", r"\$")


@dataclass
class PlanPoint:
    step_ms: float          # predicted step time
    reserved_bytes: float   # predicted peak reserved per rank
    fits: bool
    on_front: bool = False  # a fitting configuration no other fitting one is both faster and smaller than
    chosen: bool = False
    label: str = ""         # shown next to the point: the chosen one's flags, a front point's rank


def plan_scatter(points: list[PlanPoint], capacity_bytes: float, title: str, path: pathlib.Path) -> pathlib.Path:
    return _save(plan_scatter_figure(points, capacity_bytes, title), path)


def plan_scatter_figure(points: list[PlanPoint], capacity_bytes: float, title: str):
    """A plan's configurations: peak reserved per rank (GiB, y) against the predicted step time (ms, x).
    Those that fit are filled points, those that do not hollow grey ones; the device's capacity is a
    horizontal line; the Pareto front of those that fit is a step line (right and down: each point
    on it is faster than the next, the next smaller); the chosen one is a star with its flags beside
    it, above it (the chosen is the fastest that fits: what is above it is slower or does not fit).
    Only the front and the chosen one are labelled (at most MAX_DRAWN labels; none past that),
    so any number of points can be drawn."""
    fig, ax = plt.subplots(figsize=(8.5, 5.0))
    fits = [p for p in points if p.fits]
    misfits = [p for p in points if not p.fits]
    if misfits:
        ax.scatter([p.step_ms for p in misfits], [p.reserved_bytes / GiB for p in misfits], s=36, marker="o",
                   facecolors="none", edgecolors="#999999", label="does not fit", zorder=2)
    if fits:
        ax.scatter([p.step_ms for p in fits], [p.reserved_bytes / GiB for p in fits], s=30, marker="o",
                   color=_PALETTE[0], alpha=0.85, label="fits", zorder=3)
    front = sorted((p for p in fits if p.on_front), key=lambda p: (p.step_ms, p.reserved_bytes))
    if front:
        ax.plot([p.step_ms for p in front], [p.reserved_bytes / GiB for p in front], drawstyle="steps-post",
                color=_PALETTE[3], linewidth=1.5, label="Pareto front (none both faster and smaller)", zorder=4)
        ax.scatter([p.step_ms for p in front], [p.reserved_bytes / GiB for p in front], s=60, marker="o",
                   facecolors="none", edgecolors=_PALETTE[3], linewidths=1.5, zorder=5)
    ax.axhline(capacity_bytes / GiB, color="black", linestyle="--", linewidth=1,
               label=f"device capacity ({capacity_bytes / GiB:.1f} GiB)", zorder=1)
    labelled = [p for p in points if p.label and not p.chosen]
    if len(labelled) <= MAX_DRAWN:
        for p in labelled:
            ax.annotate(plain_text(p.label), (p.step_ms, p.reserved_bytes / GiB), fontsize=7, xytext=(4, 4),
                        textcoords="offset points", color="#444444")
    for p in points:
        if p.chosen:
            ax.scatter([p.step_ms], [p.reserved_bytes / GiB], s=260, marker="*", color=_PALETTE[1],
                       edgecolors="black", linewidths=0.8, label="chosen", zorder=6)
            ax.annotate(plain_text(textwrap.fill(p.label, 44)), (p.step_ms, p.reserved_bytes / GiB), fontsize=8,
                        xytext=(10, 14), textcoords="offset points", va="bottom",
                        bbox=dict(boxstyle="round,pad=0.3", facecolor="white", edgecolor=_PALETTE[1], alpha=0.9),
                        arrowprops=dict(arrowstyle="-", color=_PALETTE[1]), zorder=7)
    ax.set_ylim(bottom=0, top=max([capacity_bytes] + [p.reserved_bytes for p in points]) / GiB * 1.15)  # room for the label
    ax.set_xlabel("predicted step time (ms)")
    ax.set_ylabel("peak reserved per rank (GiB)")
    ax.set_title(plain_text(title))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


@dataclass
class Series:
    """One line of a snapshot's timeline: x = event index, y = bytes (the largest in each run of events)."""
    label: str
    events: list[int]
    values: list[float]
    color: str
    style: str = "-"


def _bytes_scale(largest: float) -> tuple[float, str]:
    return (GiB, "GiB") if largest >= 4 * GiB else (MiB, "MiB")


def snapshot_timeline(series: list[Series], spans: list[tuple[str, int, int]], peaks: list[tuple[str, int, float]],
                      title: str, path: pathlib.Path) -> pathlib.Path:
    return _save(snapshot_timeline_figure(series, spans, peaks, title), path)


def snapshot_timeline_figure(series: list[Series], spans: list[tuple[str, int, int]],
                             peaks: list[tuple[str, int, float]], title: str):
    """A replayed snapshot's memory against its trace's events: each series a line (recorded
    solid, replayed dashed), the phases shaded (`spans`: phase, first event, last event; a phase's
    name written over the spans wide enough to hold it), each peak a marker (`peaks`: label, event,
    bytes). Spans and points are bounded by the replay's JSON, so any trace draws in one time."""
    _check_count(len(series) + len(peaks), "lines and peaks")
    fig, ax = plt.subplots(figsize=(10, 4.6))
    largest = max([max(s.values, default=0) for s in series] + [p[2] for p in peaks] + [1])
    scale, unit = _bytes_scale(largest)
    last = max([s.events[-1] for s in series if s.events] + [e for _, _, e in spans] + [1])
    for phase, first, end in spans:
        ax.axvspan(first - 0.5, end + 0.5, color=PHASE_COLORS.get(phase, "#f4f4f4"), zorder=0, linewidth=0)
        if (end - first) > 0.06 * last:
            ax.text((first + end) / 2, 1.0, plain_text(phase), transform=ax.get_xaxis_transform(), ha="center",
                    va="bottom", fontsize=7)
    for s in series:
        ax.plot(s.events, [v / scale for v in s.values], label=plain_text(s.label), color=s.color, linestyle=s.style,
                linewidth=1.2, drawstyle="steps-post", zorder=3)
    for i, (label, event, value) in enumerate(peaks):
        ax.scatter([event], [value / scale], s=90, marker=MARKERS[i % len(MARKERS)], facecolors="none",
                   edgecolors="black", linewidths=1.2, label=plain_text(label), zorder=5)
    ax.set_xlabel("event of the snapshot's trace")
    ax.set_ylabel(unit)
    ax.set_ylim(bottom=0, top=largest / scale * 1.08)
    ax.set_xlim(-0.5, last + 0.5)
    ax.set_title(plain_text(title), pad=16)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


@dataclass
class WhatIfBar:
    label: str                      # the setting ("default", "expandable_segments:True", ...)
    reserved_bytes: float           # peak reserved
    allocated_bytes: float          # peak allocated
    out_of_memory: str = ""         # where it ran out ("event 4512"), or ""
    lowest: bool = False            # the setting with the lowest peak reserved


def what_if_bars(bars: list[WhatIfBar], capacity_bytes: float | None, title: str, path: pathlib.Path) -> pathlib.Path:
    return _save(what_if_bars_figure(bars, capacity_bytes, title), path)


def what_if_bars_figure(bars: list[WhatIfBar], capacity_bytes: float | None, title: str):
    """The what-if table as bars: per setting its peak reserved, and its peak allocated inside it (the
    gap between them is what the cache held unallocated at worst); a setting that ran out of memory
    hatched and marked with where; the lowest peak reserved outlined; the card's size a dashed line."""
    _check_count(len(bars), "settings")
    fig, ax = plt.subplots(figsize=(max(6.5, 0.9 * len(bars) + 3), 4.4))
    largest = max([b.reserved_bytes for b in bars] + [capacity_bytes or 0, 1])
    scale, unit = _bytes_scale(largest)
    xs = range(len(bars))
    ax.bar(xs, [b.reserved_bytes / scale for b in bars], width=0.7, color=_PALETTE[0], alpha=0.45, label="peak reserved",
           edgecolor=["black" if b.lowest else "none" for b in bars],
           linewidth=[2 if b.lowest else 0 for b in bars], zorder=2)
    ax.bar(xs, [b.allocated_bytes / scale for b in bars], width=0.4, color=_PALETTE[0], label="peak allocated", zorder=3)
    for x, b in zip(xs, bars):
        if b.out_of_memory:
            ax.bar([x], [b.reserved_bytes / scale], width=0.7, fill=False, hatch="//", edgecolor=_PALETTE[3], zorder=4)
            ax.text(x, b.reserved_bytes / scale, plain_text("OOM at\n" + b.out_of_memory), ha="center", va="bottom",
                    fontsize=6, color=_PALETTE[3], zorder=5)
    if capacity_bytes:
        ax.axhline(capacity_bytes / scale, color="black", linestyle="--", linewidth=1,
                   label=f"card ({capacity_bytes / scale:.2f} {unit})", zorder=1)
    ax.set_xticks(list(xs), [plain_text(b.label) + (" (lowest)" if b.lowest else "") for b in bars], rotation=30,
                  ha="right", fontsize=7)
    ax.set_ylabel(unit)
    ax.set_ylim(bottom=0, top=largest / scale * 1.15)
    ax.set_title(plain_text(title))
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig
