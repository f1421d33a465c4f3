"""Noise is not a verdict (issue 27, item 9): repetitions are read as Google Benchmark aggregates
them, a time difference within their spread is "not resolved at this noise", a claim about hardware
the CPU lacks is "not measurable on CPU", and a quick run says so on every page."""
from __future__ import annotations

import json
import math

from conftest import FIXTURE, section_tables
from reports.trainmem_report import claims, noise
from reports.trainmem_report.__main__ import main
from reports.trainmem_report.results import load_folder

MiB = 1024 * 1024
CPU = {"device": {"kind": "cpu", "name": "cpu", "cpu_model": "test"}, "allocator": {"config": "x"}}


def stddev(xs: list[float]) -> float:
    """The sample standard deviation, as Google Benchmark's "stddev" aggregate computes it."""
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))


def repeated(name: str, times_ms: list[float], **counters) -> list[dict]:
    """One case as `--benchmark_repetitions=N` writes it: N iterations, then the aggregates."""
    case = f"{name}/real_time"
    entries = [{"name": case, "run_name": case, "run_type": "iteration", "repetitions": len(times_ms),
                "repetition_index": i, "real_time": t, "cpu_time": t / 2, "time_unit": "ms", **counters}
               for i, t in enumerate(times_ms)]
    if len(times_ms) > 1:
        ordered = sorted(times_ms)
        median = ordered[len(ordered) // 2] if len(ordered) % 2 else sum(ordered[len(ordered) // 2 - 1:][:2]) / 2
        for aggregate, value in (("mean", sum(times_ms) / len(times_ms)), ("median", median),
                                 ("stddev", stddev(times_ms))):
            entries.append({"name": f"{case}_{aggregate}", "run_name": case, "run_type": "aggregate",
                            "aggregate_name": aggregate, "repetitions": len(times_ms), "real_time": value,
                            "cpu_time": value / 2, "time_unit": "ms", **counters})
    return entries


def write_folder(path, files: dict[str, list[dict]], run: dict | None = None):
    path.mkdir()
    (path / "device.json").write_text(json.dumps(CPU))
    for name, entries in files.items():
        (path / f"{name}.json").write_text(json.dumps({"context": {}, "benchmarks": entries}))
    if run is not None:
        (path / "run.json").write_text(json.dumps(run))
    return path


def checkpointing(none_ms: list[float], full_ms: list[float]) -> list[dict]:
    return (repeated("BM_Recompute/small/L4/none", none_ms, peak_allocated_bytes=100 * MiB,
                     activations_peak_bytes=80 * MiB) +
            repeated("BM_Recompute/small/L4/full", full_ms, peak_allocated_bytes=60 * MiB,
                     activations_peak_bytes=40 * MiB))


def verdict_of(folder, name: str) -> claims.Claim:
    return next(c for c in claims.evaluate(load_folder(folder)) if c.claim.startswith(name))


def test_repetitions_become_one_case_with_its_median_and_spread(tmp_path):
    folder = load_folder(write_folder(tmp_path / "r", {"bench_checkpointing": checkpointing([50, 44, 47], [60, 61, 59])}))
    runs = {b.name: b for b in folder.runs("bench_checkpointing")}
    assert len(folder.runs("bench_checkpointing")) == 2  # one per case, not one per repetition
    none = runs["BM_Recompute/small/L4/none"]
    assert none.real_time_ms == 47 and none.repetitions == 3
    assert none.time_stddev_ms == stddev([50, 44, 47])


def test_the_rule_resolves_only_gaps_beyond_k_combined_spreads(tmp_path):
    folder = load_folder(write_folder(tmp_path / "r", {"bench_checkpointing": checkpointing(
        [40, 50, 45], [52, 42, 47]) + repeated("BM_Recompute/small/L4/sqrt", [100, 101, 102])}))
    runs = {b.name.rsplit("/", 1)[-1]: b for b in folder.runs("bench_checkpointing")}
    assert noise.is_less(runs["none"], runs["full"]) is None       # 45 vs 47, spreads of 5
    assert noise.ordering(runs["full"], runs["none"]) == noise.NOT_RESOLVED
    assert noise.is_less(runs["none"], runs["sqrt"]) is True       # 45 vs 101: far beyond 2 x sqrt(25 + 1)
    assert noise.is_less(runs["sqrt"], runs["none"]) is False
    # the factor scales b's time and its spread: 2.5 x 45 - 101 = 11.5, within 2 x sqrt(1 + 2.5² x 25) = 25.1
    assert noise.is_less(runs["sqrt"], runs["none"], 2.5) is None
    assert noise.is_less(runs["sqrt"], runs["none"], 3.0) is True  # 135 - 101 = 34 > 2 x sqrt(1 + 225) = 30.1


def test_a_case_run_once_resolves_nothing(tmp_path):
    folder = load_folder(write_folder(tmp_path / "r", {"bench_checkpointing": checkpointing([10], [500])}))
    none, full = sorted(folder.runs("bench_checkpointing"), key=lambda b: b.real_time_ms)
    assert none.time_stddev_ms is None and noise.is_less(none, full) is None


def test_a_time_claim_within_the_noise_is_not_resolved(tmp_path):
    """full 46% slower by the medians (the failing threshold is 30%), but the repetitions spread so
    much that the gap to 1.3 x none is within the noise: no verdict either way."""
    noisy = write_folder(tmp_path / "noisy", {"bench_checkpointing": checkpointing([30, 45, 60], [50, 66, 80])})
    c = verdict_of(noisy, "Activation checkpointing saves")
    assert c.verdict == noise.NOT_RESOLVED and noise.NOT_RESOLVED in c.measured
    quiet = write_folder(tmp_path / "quiet", {"bench_checkpointing": checkpointing([44.5, 45, 45.5], [65.5, 66, 66.5])})
    assert verdict_of(quiet, "Activation checkpointing saves").verdict == claims.FAILS
    fast = write_folder(tmp_path / "fast", {"bench_checkpointing": checkpointing([44.5, 45, 45.5], [50.5, 51, 51.5])})
    assert verdict_of(fast, "Activation checkpointing saves").verdict == claims.HOLDS


def test_a_memory_failure_is_not_hidden_by_time_noise(tmp_path):
    entries = (repeated("BM_Recompute/small/L4/none", [30, 45, 60], peak_allocated_bytes=100 * MiB) +
               repeated("BM_Recompute/small/L4/full", [30, 45, 60], peak_allocated_bytes=90 * MiB))
    folder = write_folder(tmp_path / "r", {"bench_checkpointing": entries})
    assert verdict_of(folder, "Activation checkpointing saves").verdict == claims.FAILS


def test_claims_the_cpu_cannot_test_say_so(tmp_path):
    precision = (repeated("BM_Precision/small/fp32", [100, 101, 102], peak_allocated_bytes=1) +
                 repeated("BM_Precision/small/bf16", [200, 201, 202], peak_allocated_bytes=1))
    loader = (repeated("BM_Loader/loader:1", [1, 1.01, 1.02]) + repeated("BM_Loader/loader:3", [2, 2.01, 2.02]))
    for e, label in zip(loader, ["lazy"] * 6 + ["lazy_unpinned"] * 6):
        e["label"] = label
    folder = write_folder(tmp_path / "r", {"bench_mixed_precision": precision, "bench_lazy_loading": loader})
    for name in ("Mixed precision makes training faster", "pin_memory gives faster"):
        c = verdict_of(folder, name)
        assert c.verdict == claims.NOT_MEASURABLE_ON_CPU, (name, c.verdict)
        assert c.measured  # the numbers are still shown


def test_a_quick_run_is_marked_on_every_page(tmp_path):
    run = {"command": "ci/suite --quick", "quick": True, "repetitions": 3, "min_time_s": 0.01}
    folder = write_folder(tmp_path / "r", {"bench_checkpointing": checkpointing([45, 46, 47], [60, 61, 62])}, run)
    assert main(["render", str(folder)]) == 0
    summary, page = (folder / "summary.md").read_text(), (folder / "index.html").read_text()
    first_lines = "\n".join(summary.splitlines()[:4])
    assert "a quick run" in first_lines and "ci/suite --quick" in first_lines
    assert 'class="notice"' in page and "a quick run" in page.split("<h2", 1)[0]
    # the trade-off plot's title says so too (its caption and file are in the checkpointing section)
    table = section_tables(summary, "Activation checkpointing (bench_checkpointing)")[0]
    assert table[0][:4] == ["group", "setting", "time / iteration", "spread"]
    assert table[1][0][3].startswith("± ") and table[1][0][3].endswith("(3 runs)")


def test_a_full_run_carries_no_quick_notice(tmp_path):
    run = {"command": "ci/suite", "quick": False, "repetitions": 5, "min_time_s": None}
    folder = write_folder(tmp_path / "r", {"bench_checkpointing": checkpointing([45, 46, 47], [60, 61, 62])}, run)
    assert main(["render", str(folder)]) == 0
    assert "a quick run" not in (folder / "summary.md").read_text()


# --- issue 40, item 7: a clean report has nothing missing; a claim cell says one thing ---------------

def test_a_counter_that_is_zero_in_every_repetition_is_not_missing_data(tmp_path):
    """Google Benchmark's "cv" aggregate is stddev / mean: NaN (0 / 0) for a counter that is 0 in
    every repetition. There is no variation to measure, nothing is missing: no problem is listed, and
    the counter is the median's 0."""
    entries = repeated("BM_Recompute/small/L4/none", [45, 46, 47], peak_allocated_bytes=100 * MiB, host_bytes=0)
    case = entries[0]["run_name"]
    entries.append({"name": f"{case}_cv", "run_name": case, "run_type": "aggregate", "aggregate_name": "cv",
                    "aggregate_unit": "percentage", "repetitions": 3, "real_time": 0.02, "cpu_time": 0.02,
                    "time_unit": "ms", "peak_allocated_bytes": 0.0, "host_bytes": math.nan})
    folder = write_folder(tmp_path / "r", {"bench_checkpointing": entries}, run={"quick": False})
    loaded = load_folder(folder)
    assert loaded.problems == []
    assert loaded.runs("bench_checkpointing")[0].counters["host_bytes"] == 0
    assert main(["render", str(folder)]) == 0
    missing = (folder / "summary.md").read_text().split("## Missing from these results", 1)[1]
    assert "host" not in missing and "nan" not in missing


def test_the_committed_clean_run_lists_no_problem():
    """The fixture is a whole `ci/suite --quick` run: its NaN "cv" aggregates (counters that are 0 in
    every repetition) were 49 lines of "missing" data."""
    assert load_folder(FIXTURE).problems == []


def test_a_claim_with_a_verdict_does_not_also_say_it_is_not_resolved():
    """Every claim of the committed run: a verdict (holds, does not hold, not measurable on CPU) says
    nothing of the noise; "not resolved at this noise" is said only where it is the verdict."""
    for c in claims.evaluate(load_folder(FIXTURE)):
        if c.verdict == noise.NOT_RESOLVED:
            assert noise.NOT_RESOLVED in c.measured, c  # and why
        else:
            assert noise.NOT_RESOLVED not in c.measured, c


def test_a_failing_part_decides_and_the_noise_of_another_is_not_mentioned(tmp_path):
    """Two depths: at L4 the memory saving fails (10%), at L8 the time is within the noise. The claim
    does not hold, resolved by L4's memory alone: the cell says so and nothing else."""
    entries = (repeated("BM_Recompute/small/L4/none", [44.5, 45, 45.5], peak_allocated_bytes=100 * MiB) +
               repeated("BM_Recompute/small/L4/full", [50.5, 51, 51.5], peak_allocated_bytes=90 * MiB) +
               repeated("BM_Recompute/small/L8/none", [30, 45, 60], peak_allocated_bytes=100 * MiB) +
               repeated("BM_Recompute/small/L8/full", [50, 66, 80], peak_allocated_bytes=60 * MiB))
    c = verdict_of(write_folder(tmp_path / "r", {"bench_checkpointing": entries}), "Activation checkpointing saves")
    assert c.verdict == claims.FAILS
    assert "not resolved" not in c.measured and "standard deviations" not in c.measured, c.measured
    assert "small L8: memory -40.0%, time +46.7%" in c.measured  # the numbers are still shown
