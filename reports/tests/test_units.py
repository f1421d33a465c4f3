"""The renderer's pieces on hand-made inputs whose answers are known exactly."""
from __future__ import annotations

import json

from reports.trainmem_report import claims, timeline
from reports.trainmem_report.__main__ import main
from reports.trainmem_report.document import fmt_bytes, fmt_ms
from reports.trainmem_report.results import load_folder

MiB = 1024 * 1024


def ev(action, addr, size, category="other", step=1, phase="forward", block_size=None):
    return {"action": action, "addr": addr, "size": size, "block_size": block_size or size,
            "category": category, "step": step, "phase": phase}


def test_timeline_replays_a_hand_made_trace():
    trace = {"events": [
        ev("segment_alloc", 100, 20 * MiB, step=0, phase="none"),
        ev("alloc", 100, 1000, "parameters", step=0, phase="none", block_size=1024),
        ev("alloc", 2000, 4 * MiB, "activations"),
        ev("alloc", 9000, 2 * MiB, "workspace", phase="backward"),
        ev("free_requested", 9000, 2 * MiB, "workspace", phase="backward"),
        ev("free_completed", 9000, 2 * MiB, "workspace", phase="backward"),  # counted once
        ev("segment_map", 0, 2 * MiB, phase="backward"),                    # expandable: reserved grows
        ev("free_requested", 2000, 4 * MiB, "activations", phase="backward"),
        ev("alloc", 5000, 512, "optimizer_state", phase="optimizer"),
        ev("oom", 0, 64 * MiB, phase="optimizer"),                          # changes nothing
    ]}
    assert timeline.complete_steps(trace) == [1] and timeline.representative_step(trace) == 1
    assert timeline.peak_allocated(trace) == 1024 + 6 * MiB
    t = timeline.step_timeline(trace)
    assert t.step == 1 and t.x == list(range(8))
    assert t.by_category["parameters"] == [1024] * 8
    assert t.by_category["activations"] == [4 * MiB] * 5 + [0] * 3
    assert t.by_category["workspace"] == [0, 2 * MiB, 0, 0, 0, 0, 0, 0]
    assert t.by_category["optimizer_state"] == [0] * 6 + [512] * 2
    assert t.reserved == [20 * MiB] * 4 + [22 * MiB] * 4
    assert t.phases == [("forward", 0, 0), ("backward", 1, 5), ("optimizer", 6, 7)]


def test_formatting_keeps_enough_digits():
    assert fmt_bytes(5429248) == "5.18 MiB"
    assert fmt_bytes(80 * 2**30) == "80.00 GiB"
    assert fmt_ms(10.78) == "10.8 ms" and fmt_ms(0.0042) == "4.2 µs" and fmt_ms(3.5e-5) == "35.0 ns"


def zero_bench(world, points):
    """A bench_zero.json of one world size as bench_zero writes it (names, counters, the world size
    in the context), with hand-made numbers."""
    runs = []
    for stage, states in points:
        runs.append({"name": f"BM_Zero/small/N{world}/zero{stage}/offload_none/iterations:5/real_time",
                     "run_type": "iteration", "real_time": 10.0, "time_unit": "ms", "stage": stage,
                     "parameters_bytes": states / 4, "gradients_bytes": states / 4,
                     "optimizer_state_bytes": states / 2, "peak_allocated_bytes": states * 1.5,
                     "parameters_peak_bytes": states, "gradients_peak_bytes": states})  # peaks: not model states
    return {"context": {"trainmem.device.kind": "cpu", "trainmem.device.name": "x", "trainmem.world_size": str(world)},
            "benchmarks": runs}


def test_zero_claim_and_plot_follow_the_numbers(tmp_path):
    folder = tmp_path / "zero"
    folder.mkdir()
    psi16 = 16 * MiB
    (folder / "bench_zero.json").write_text(json.dumps(zero_bench(1, [(0, psi16), (3, psi16)])))
    (folder / "bench_zero-n2.json").write_text(json.dumps(zero_bench(2, [(3, psi16 / 2)])))
    (folder / "bench_zero-n4.json").write_text(json.dumps(zero_bench(4, [(0, psi16), (3, psi16 / 4 + MiB / 2)])))
    loaded = load_folder(folder)
    assert [b.name for b in loaded.runs("bench_zero")][:2] == ["BM_Zero/small/N1/zero0/offload_none",
                                                               "BM_Zero/small/N1/zero3/offload_none"]
    assert claims.zero_point(loaded.runs("bench_zero")[-1]) == (3, 4, "none")
    claim = claims.zero3_divides_by_n(loaded)
    assert claim.verdict == claims.HOLDS
    assert list(claim.numbers) == ["N=4 ratio"]  # N = 2 has no stage 0 run to compare with
    assert abs(claim.numbers["N=4 ratio"] - 16 / 4.5) < 1e-9
    assert main(["render", str(folder)]) == 0
    assert (folder / "plots" / "zero-per-rank.png").stat().st_size > 2000

    (folder / "bench_zero-n4.json").write_text(json.dumps(zero_bench(4, [(0, psi16), (3, psi16 / 2)])))
    assert claims.zero3_divides_by_n(load_folder(folder)).verdict == claims.FAILS


def bench_file(folder, name, runs, context=None):
    """A Google Benchmark file with hand-made runs: (name, time in ms, counters), each as 3
    repetitions summarised by Google Benchmark's median and stddev aggregates, the spread 0.1 ms
    (quiet: a gap of 1 ms is beyond the noise, noise.py)."""
    entries = [{"name": f"{n}_{aggregate}", "run_name": n, "run_type": "aggregate", "aggregate_name": aggregate,
                "repetitions": 3, "real_time": t if aggregate == "median" else 0.1, "time_unit": "ms", **counters}
               for n, t, counters in runs for aggregate in ("median", "stddev")]
    (folder / f"{name}.json").write_text(json.dumps({"context": context or {}, "benchmarks": entries}))


def test_allocator_claims_follow_the_numbers(tmp_path):
    """The leak claim fails exactly when a run that keeps nothing grows its reserved memory, and
    the empty_cache claim needs both conditions (cheap and less fragmented)."""
    growth = lambda no_leak, sequence: [
        ("BM_ReservedGrowth/no_leak/iterations:1", 1.0, {"reserved_growth_bytes": no_leak,
                                                         "allocated_at_step_end_growth_bytes": 0}),
        ("BM_ReservedGrowth/leak/iterations:1", 1.0, {"reserved_growth_bytes": 18 * MiB,
                                                      "allocated_at_step_end_growth_bytes": 17 * MiB}),
        ("BM_ReservedGrowth/growing_sequence/iterations:1", 1.0, {"reserved_growth_bytes": sequence,
                                                                  "allocated_at_step_end_growth_bytes": 8192})]
    empty_cache = lambda every_ms, every_reserved: [
        ("BM_TrainEmptyCache/fixed/never", 100.0, {"peak_reserved_bytes": 38 * MiB, "peak_allocated_bytes": 36 * MiB}),
        ("BM_TrainEmptyCache/fixed/every-step", every_ms, {"peak_reserved_bytes": every_reserved,
                                                           "peak_allocated_bytes": 36 * MiB})]
    bench_file(tmp_path, "bench_allocator", growth(0, 0) + empty_cache(104.0, 37 * MiB))
    folder = load_folder(tmp_path)
    assert claims.growing_reserved_means_a_leak(folder).verdict == claims.HOLDS
    assert claims.empty_cache_is_cheap(folder).verdict == claims.HOLDS
    bench_file(tmp_path, "bench_allocator", growth(0, 48 * MiB) + empty_cache(104.0, 38 * MiB))
    folder = load_folder(tmp_path)
    leak = claims.growing_reserved_means_a_leak(folder)
    assert leak.verdict == claims.FAILS and "growing_sequence: reserved +48.00 MiB" in leak.measured
    assert claims.empty_cache_is_cheap(folder).verdict == claims.FAILS  # no fragmentation reduced
    bench_file(tmp_path, "bench_allocator", empty_cache(106.0, 37 * MiB))
    assert claims.empty_cache_is_cheap(load_folder(tmp_path)).verdict == claims.FAILS  # 6% slower
    assert claims.growing_reserved_means_a_leak(load_folder(tmp_path)).verdict == claims.NOT_MEASURED


def test_fsdp_claim_follows_the_numbers(tmp_path):
    """Peak = base + units x unit: holds when the measured peaks equal the formula with 1 unit
    gathered (2 with prefetch); a third unit gathered at the peak makes it fail."""
    unit, base = 3 * MiB, 10 * MiB

    def run(k, prefetch, units, peak=None):
        peak = base + units * k * unit if peak is None else peak
        return (f"BM_Fsdp/small/full/{'layer' if k == 1 else f'{k}-layers'}/{'prefetch' if prefetch else 'no_prefetch'}"
                "/iterations:5", 10.0, {"parameters_peak_bytes": peak,
                                        "predicted_parameters_peak_bytes": base + (2 if prefetch else 1) * k * unit,
                                        "gathered_units_at_peak": units})
    two_ranks = {"trainmem.world_size": "2"}
    bench_file(tmp_path, "bench_fsdp", [run(1, False, 1), run(1, True, 2), run(2, False, 1), run(2, True, 2)], two_ranks)
    claim = claims.fsdp_peak_is_shard_plus_units(load_folder(tmp_path))
    assert claim.verdict == claims.HOLDS
    assert "N = 2, 1-layer units: 13.00 MiB = 10.00 MiB + 1 x 3.00 MiB" in claim.measured
    bench_file(tmp_path, "bench_fsdp", [run(1, False, 1), run(1, True, 3)], two_ranks)
    assert claims.fsdp_peak_is_shard_plus_units(load_folder(tmp_path)).verdict == claims.FAILS
