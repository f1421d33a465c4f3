"""The report as a document: sections of paragraphs, tables and figures. report.py builds it
once; markdown.py and html.py write the same document, so summary.md and index.html never
disagree. Numbers are formatted here, in one place.
"""
from __future__ import annotations

import pathlib
from dataclasses import dataclass, field

MiB = 1024.0 * 1024.0


def fmt_bytes(b: float | None) -> str:
    """Bytes as MiB with two decimals (GiB above 10 GiB): "5.18 MiB"."""
    if b is None:
        return "-"
    if b >= 10 * 1024 * MiB:
        return f"{b / (1024 * MiB):.2f} GiB"
    return f"{b / MiB:.2f} MiB"


def fmt_size(n: float) -> str:
    """A power-of-two block or buffer size as a name: 4096 -> "4 KiB", 16777216 -> "16 MiB"."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{int(n // scale)} {unit}"
    return f"{int(n)} B"


def fmt_exact_bytes(b: float | None) -> str:
    """Bytes to the byte, for figures compared with a formula that is exact: "1,692,672 B"."""
    return "-" if b is None else f"{b:,.0f} B"


def fmt_ms(ms: float | None) -> str:
    """Milliseconds, switching to µs and ns below 1 ms: "10.8 ms", "412.3 µs", "35.1 ns"."""
    if ms is None:
        return "-"
    if ms >= 1:
        return f"{ms:.1f} ms"
    if ms >= 1e-3:
        return f"{ms * 1e3:.1f} µs"
    return f"{ms * 1e6:.1f} ns"


def fmt_spread(stddev_ms: float | None, repetitions: int) -> str:
    """A time's spread over its repetitions: "± 2.3 ms (5 runs)", or "1 run" without one."""
    if stddev_ms is None:
        return f"{repetitions} run" + ("s" if repetitions != 1 else "")
    return f"± {fmt_ms(stddev_ms)} ({repetitions} runs)"


def fmt_number(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0:
        return "0"
    if abs(x) >= 1e5:
        return f"{x:,.0f}"
    if abs(x) >= 100:
        return f"{x:.1f}"
    return f"{x:.4g}"


def fmt_rate(x: float | None) -> str:
    """Per-second rates: 23,742/s."""
    return "-" if x is None else f"{x:,.0f}/s"


def fmt_percent(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1f}%"


def fmt_bandwidth(x: float | None) -> str:
    """Bytes per second in decimal GB/s, as nccl-tests prints them: "2.78 GB/s"."""
    return "-" if x is None else f"{x / 1e9:.2f} GB/s"


FORMATTERS = {"bytes": fmt_bytes, "rate": fmt_rate, "number": fmt_number, "ms": fmt_ms, "bandwidth": fmt_bandwidth,
              "exact_bytes": fmt_exact_bytes}


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class Figure:
    path: pathlib.Path      # the PNG file
    caption: str


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    links: list[tuple[str, pathlib.Path]] = field(default_factory=list)  # (text, file)
    figures_per_row: int = 1   # >1: figures side by side (one per device when comparing)


@dataclass
class Document:
    title: str
    intro: list[str] = field(default_factory=list)
    notice: list[str] = field(default_factory=list)    # shown first, boxed, on every page (a quick run)
    sections: list[Section] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)   # what could not be shown, and why
    # the closing list's heading, and its one line when nothing is missing (a plan's page names its own)
    missing_title: str = "Missing from these results"
    nothing_missing: str = "Nothing: every suite and run the report knows is here."
