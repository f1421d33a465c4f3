"""The report's plots, one function each. Every function takes plain numbers (no result files),
writes one PNG and returns its path. matplotlib runs headless (Agg): no display, no network.
"""
from __future__ import annotations

import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import matplotlib.ticker  # noqa: E402

from .output_file import make_folder, write_file  # noqa: E402
from .timeline import CATEGORIES, Timeline  # noqa: E402

MiB = 1024.0 * 1024.0
CATEGORY_COLORS = dict(zip(CATEGORIES, ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860",
                                        "#da8bc3", "#8c8c8c"]))
PHASE_COLORS = {"forward": "#e8f0fb", "backward": "#fbeee6", "optimizer": "#eaf5ea"}


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


def tradeoff(series: dict[str, list[tuple[float, float, str]]], title: str, xlabel: str, ylabel: str,
             path: pathlib.Path) -> pathlib.Path:
    """Memory (MiB, y) against time (x), a point per setting, labelled; per group, a dashed line
    joins its Pareto front (the settings no other setting beats in both memory and time)."""
    _check_count(sum(len(points) for points in series.values()), "labelled points")
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, points in series.items():
        points = sorted(points)
        front = [p for i, p in enumerate(points) if all(q[1] > p[1] for q in points[:i])]
        dots = ax.plot([p[0] for p in points], [p[1] / MiB for p in points], marker="o", linestyle="none",
                       label=name)
        ax.plot([p[0] for p in front], [p[1] / MiB for p in front], linestyle="--", color=dots[0].get_color())
        for x, y, label in points:
            ax.annotate(label, (x, y / MiB), fontsize=7, xytext=(4, 3), textcoords="offset points")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def lines(series: dict[str, list[tuple[float, float]]], title: str, xlabel: str, ylabel: str,
          path: pathlib.Path, logx: bool = False, logy: bool = False,
          dashed: dict[str, str] | None = None, xtick_label=lambda x: f"{x:g}") -> pathlib.Path:
    """A line per series (scaling plots: memory or TFLOP/s vs sequence length or world size).
    `dashed` maps a series to the series whose colour it takes, drawn dashed with crosses: a
    formula next to the measurement it predicts. With `logx`, the ticks are the x values measured,
    labelled by `xtick_label`."""
    _check_count(len(series), "lines")
    _check_count(len({p[0] for points in series.values() for p in points}), "x values")
    dashed = dashed or {}
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    colors = {}
    for name, points in sorted(series.items(), key=lambda item: item[0] in dashed):  # measured first
        points = sorted(points)
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        if name in dashed:
            ax.plot(xs, ys, linestyle="--", linewidth=1, marker="x", color=colors.get(dashed[name]), label=name)
        else:
            colors[name] = ax.plot(xs, ys, marker="o", label=name)[0].get_color()
    if logx:
        ax.set_xscale("log", base=2)
        xs = sorted({p[0] for points in series.values() for p in points})
        ax.set_xticks(xs, [xtick_label(x) for x in xs])  # 64, 128, ... rather than 2^6, 2^7
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    if len(series) > 5:  # a long legend goes beside the plot, not over the lines
        fig.set_size_inches(9, 4.2)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    else:
        ax.legend(fontsize=7)
    return _save(fig, path)


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
    _check_count(len(series), "lines")
    fig, ax = plt.subplots(figsize=(6.5, 4.0))
    for name, points in series.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], label=name, linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


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
