"""How the report (reports/trainmem_report) presents bench_accumulation: micro-batch x accumulation
steps at the same effective batch, and the claim it tests."""
from reports.trainmem_report.claims import Claim, claim, noise_note, pct, table, verdict
from reports.trainmem_report.document import fmt_bytes, fmt_percent
from reports.trainmem_report.noise import is_less
from reports.trainmem_report.presentation import MEMORY_COLUMNS, Suite, args, words
from reports.trainmem_report.results import ResultFolder
from reports.trainmem_report.result_schema import PEAK_ALLOCATED, category_peak_counter

SUITE = Suite(
    "accumulation", "Gradient accumulation", "bench_accumulation",
    "micro-batch x accumulation steps at the same effective batch",
    group=lambda b: words(b)[1] if len(words(b)) > 1 else "model",
    setting=lambda b: f"{args(b).get('micro', '?')}x{args(b).get('K', '?')}",
    columns=MEMORY_COLUMNS + [(category_peak_counter("activations"), "activations peak", "bytes"),
                              ("tokens_per_s", "tokens/s", "rate")],
    order=2, technique_order=4,
    tradeoff=(PEAK_ALLOCATED, "peak allocated (MiB)"),
    summary_baseline="32x1")


@claim("Gradient accumulation gives a large effective batch without its memory", SUITE,
       "same effective batch: peak allocated with the smallest micro-batch lower than with the whole batch at once")
def accumulation_lowers_peak(f: ResultFolder, c: Claim) -> None:
    for group, runs in table(f, SUITE).items():
        by_micro = sorted(runs.values(), key=lambda b: int(args(b).get("micro", 0)))
        if len(by_micro) >= 2:
            small, whole = by_micro[0], by_micro[-1]
            saving = -pct(small.counter(PEAK_ALLOCATED), whole.counter(PEAK_ALLOCATED))
            overhead = pct(small.real_time_ms, whole.real_time_ms)
            faster = is_less(small, whole)
            c.numbers["saving %"], c.numbers["overhead %"] = saving, overhead
            c.verdict = verdict(small.counter(PEAK_ALLOCATED) < whole.counter(PEAK_ALLOCATED))
            c.measured = (f"{group}: {SUITE.setting(small)} "
                          f"{fmt_bytes(small.counter(PEAK_ALLOCATED))} vs "
                          f"{SUITE.setting(whole)} "
                          f"{fmt_bytes(whole.counter(PEAK_ALLOCATED))} (-{saving:.1f}%), "
                          f"time per step {fmt_percent(overhead)}{noise_note(faster, small, whole)}")
            break
