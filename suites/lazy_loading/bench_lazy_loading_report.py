"""How the report (reports/trainmem_report) presents bench_lazy_loading: the dataset on the device
(eager) or on the host with prefetched batches (lazy), and the claims it tests."""
from reports.trainmem_report.claims import (NOT_MEASURABLE_ON_CPU, Claim, all_hold, claim, noise_note, on_cpu,
                                            table, verdict)
from reports.trainmem_report.document import fmt_bytes
from reports.trainmem_report.noise import is_less
from reports.trainmem_report.presentation import MEMORY_COLUMNS, Suite, generic_setting, words
from reports.trainmem_report.results import Benchmark, ResultFolder
from reports.trainmem_report.result_schema import category_peak_counter


def _setting(b: Benchmark) -> str:
    return b.label.split()[-1] if b.label else generic_setting(b)


def _group(b: Benchmark) -> str:
    w = words(b)
    return "training step " + w[1] if w[0] == "BM_Train" and len(w) > 1 else "loader only"


SUITE = Suite(
    "lazy_loading", "Lazy data loading", "bench_lazy_loading",
    "the dataset on the device (eager) or on the host with prefetched batches (lazy)",
    group=_group, setting=_setting,
    columns=MEMORY_COLUMNS + [(category_peak_counter("data"), "data peak", "bytes"),
                              ("tokens_per_s", "tokens/s", "rate")],
    order=7, technique_order=6)


@claim("Keep the dataset on the host and move batches: less device memory, same speed", SUITE,
       "training step: device data bytes lower with lazy than eager, tokens/s at least 90% of eager "
       "(the same tokens per step: lazy's step time at most eager's / 0.9)")
def lazy_loading_saves_device_memory(f: ResultFolder, c: Claim) -> None:
    for group, runs in table(f, SUITE).items():
        if group.startswith("training") and "eager" in runs and "lazy" in runs:
            eager, lazy = runs["eager"], runs["lazy"]
            speed = eager.real_time_ms / lazy.real_time_ms
            time_ok = is_less(lazy, eager, 1 / 0.9)
            c.numbers["speed ratio"] = speed
            c.verdict = verdict(all_hold([lazy.counter(category_peak_counter("data"), 0) < eager.counter(category_peak_counter("data"), 0),
                                          time_ok]))
            c.measured = (f"data on device {fmt_bytes(lazy.counter(category_peak_counter('data')))} (lazy) vs "
                          f"{fmt_bytes(eager.counter(category_peak_counter('data')))} (eager); tokens/s x{speed:.2f}"
                          f"{noise_note(time_ok, lazy, eager)}")


@claim("pin_memory gives faster host-to-device transfers", SUITE,
       "loader only: batches/s with pinned staging at least 5% above unpinned (a GPU's host-to-device "
       "copy; on the CPU there is none, so it is not measurable)")
def pinned_memory_is_faster(f: ResultFolder, c: Claim) -> None:
    runs = table(f, SUITE).get("loader only", {})
    if "lazy" in runs and "lazy_unpinned" in runs:
        pinned, unpinned = runs["lazy"], runs["lazy_unpinned"]
        ratio = unpinned.real_time_ms / pinned.real_time_ms
        faster = is_less(pinned, unpinned, 1 / 1.05)
        c.numbers["speed ratio"] = ratio
        c.verdict = NOT_MEASURABLE_ON_CPU if on_cpu(f) else verdict(faster)
        c.measured = f"pinned / unpinned throughput x{ratio:.2f}{noise_note(faster, pinned, unpinned)}"
        if on_cpu(f):
            c.measured += " (CPU backend: no host-to-device copy exists to speed up)"
