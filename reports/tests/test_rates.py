"""Rates agree with times (issue 27, item 10): every rate a benchmark reports is per second of the
wall-clock time its time column shows. Google Benchmark divides a rate counter by the main thread's
CPU time unless the benchmark uses real time, so a multi-threaded step (BLAS threads, a loader's
worker) showed more tokens/s at a longer time. Read here with the json module alone, on the
committed fixture and on a fresh `ci/suite --quick` run (TRAINMEM_BUILD_DIR)."""
from __future__ import annotations

import json
import re

import pytest

SECONDS_PER_UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
# A rate is named <amount>_per_s (common/results/benchmark_context.h, set_rate_counters), or
# <amount>/s (the attention benchmarks' TFLOP/s); its amount per iteration is <amount>_per_iteration.
RATE = re.compile(r"^(.+?)(_per_s|/s)$")
# rate = amount x iterations / seconds and time = seconds / iterations are each a few double
# operations from the same two numbers, every one within 2^-53 relative; JSON keeps 17 digits. So
# rate x time equals the amount to ~1e-15; CPU time against wall time differs by percents.
REL = 1e-9


def iteration_entries(folder):
    """(file, entry) for every measured repetition of every bench_*.json (not the aggregates: the
    mean of rates is not the rate of the mean time)."""
    for path in sorted(folder.glob("bench_*.json")):
        for entry in json.loads(path.read_text())["benchmarks"]:
            if entry.get("run_type", "iteration") == "iteration" and not entry.get("error_occurred"):
                yield path.name, entry


def test_every_rate_times_its_time_is_its_amount(results):
    checked = 0
    for file, entry in iteration_entries(results):
        seconds = entry["real_time"] * SECONDS_PER_UNIT[entry["time_unit"]]
        for key, rate in entry.items():
            m = RATE.match(key)
            if not m or not isinstance(rate, (int, float)):
                continue
            amount = entry.get(f"{m.group(1)}_per_iteration")
            assert amount is not None, f"{file}: {entry['name']}: {key} has no {m.group(1)}_per_iteration"
            assert rate * seconds == pytest.approx(amount, rel=REL), \
                f"{file}: {entry['name']}: {key} {rate} x {seconds} s != {amount}"
            assert "/real_time" in entry["name"] or "/manual_time" in entry["name"], \
                f"{file}: {entry['name']}: a rate, but the benchmark is not timed by the wall clock (UseRealTime)"
            checked += 1
    assert checked >= 20, "the results hold rates (tokens_per_s in most suites)"
