"""What a suite's presentation is: which benchmark file the suite writes, how a benchmark's name
splits into a *group* (the model or shape being measured) and a *setting* (the technique or option
being compared within the group), which counters its table shows, and what else its section has
(a trade-off plot, plots and tables of its own, claims, a place among the techniques side by side).

Each suite declares its presentation in its own folder, beside the manifest line that declares its
benchmark: `<folder>/<benchmark>_report.py` (a technique's: suites/<name>/bench_<name>_report.py), defining
`SUITE = Suite(...)`. suites.py finds them. This module holds what those files share.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .results import Benchmark
from .result_schema import PEAK_ALLOCATED, PEAK_RESERVED


def words(b: Benchmark) -> list[str]:
    """The parts of a benchmark's name that are not `key:value` arguments."""
    return [p for p in b.name.split("/") if ":" not in p]


def args(b: Benchmark) -> dict[str, str]:
    """The `key:value` parts of a benchmark's name, e.g. {"micro": "32", "K": "1"}."""
    return dict(p.split(":", 1) for p in b.name.split("/") if ":" in p)


def plain(name: str) -> str:
    """A benchmark family without Google Benchmark's prefix: "BM_AllocFree" -> "AllocFree"."""
    return name[3:] if name.startswith("BM_") else name


def generic_group(b: Benchmark) -> str:
    parts = b.name.split("/")
    return " ".join(plain(p) for p in parts[:-1]) or plain(parts[0])


def generic_setting(b: Benchmark) -> str:
    return b.name.split("/")[-1]


# Table columns: (counter, header, kind). kind: "bytes", "rate", "number". The time column
# (ms per iteration) always comes first.
MEMORY_COLUMNS = [(PEAK_ALLOCATED, "peak allocated", "bytes"),
                  (PEAK_RESERVED, "peak reserved", "bytes")]


def measured_and_formula(counters: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """Byte columns in pairs: each measured counter, then its prediction (`predicted_<counter>`)."""
    columns = []
    for key, header in counters:
        columns += [(key, header, "exact_bytes"), (f"predicted_{key}", f"{header} (formula)", "exact_bytes")]
    return columns


@dataclass(frozen=True)
class Suite:
    key: str
    title: str
    bench: str                      # the Google Benchmark file's stem, "bench_<name>"
    what: str                       # one line: what the suite compares
    explain: str = ""               # the technique and its formula, where the suite's page gives them
    group: Callable[[Benchmark], str] = generic_group
    setting: Callable[[Benchmark], str] = generic_setting
    columns: list = field(default_factory=lambda: list(MEMORY_COLUMNS))
    rank_by_time: bool = True       # compare the ranking of settings by time between devices
    # Further tables after the main one, for benchmark families with counters of their own:
    # (title, name prefix of the family, columns).
    details: list = field(default_factory=list)
    # Its place in the report where no catalog gives one: a results folder without suites.json
    # (written before the catalog existed) and the comparison of several folders.
    order: int = 0
    # Its place among the techniques in the claims table and in "Techniques side by side".
    technique_order: int = 0
    # (memory counter on the y axis, its axis label): the suite has a memory-vs-time trade-off plot.
    tradeoff: tuple[str, str] | None = None
    # Plots of its own, after the category bars and the trade-off: figures(folder, suite, out) -> [Figure].
    figures: Callable | None = None
    # Tables of its own, after the detail tables: tables(folder, suite) -> [Table].
    tables: Callable | None = None
    # "Techniques side by side": the suite's own setting without the technique (e.g. "none"), whose
    # peak must equal the reference run's for a group to be compared there...
    summary_baseline: str | None = None
    # ... and, on the one suite that measures it, the reference run's name (e.g. "BM_TrainStep/small").
    summary_reference: str | None = None
    # The guides' claims about it, in the order the file declares them (claims.claim adds each).
    claims: list = field(default_factory=list)

    def paragraphs(self) -> list[str]:
        """What the suite's section says before its tables."""
        return [self.what] + ([self.explain] if self.explain else [])


def safe_split(suite: Suite, b: Benchmark) -> tuple[str, str]:
    """(group, setting), falling back to the generic split for a name the suite did not expect."""
    try:
        return suite.group(b), suite.setting(b)
    except (IndexError, KeyError, ValueError):
        return generic_group(b), generic_setting(b)
