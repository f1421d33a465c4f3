"""How the report (reports/trainmem_report) presents bench_checkpointing: the recompute policies per
model depth, and the claims it tests."""
from reports.trainmem_report.claims import Claim, all_hold, claim, noise_note, pct, table, verdict
from reports.trainmem_report.document import fmt_percent
from reports.trainmem_report.noise import is_less
from reports.trainmem_report.presentation import MEMORY_COLUMNS, Suite, generic_setting
from reports.trainmem_report.results import ResultFolder
from reports.trainmem_report.result_schema import PEAK_ALLOCATED, category_peak_counter

SUITE = Suite(
    "checkpointing", "Activation checkpointing", "bench_checkpointing",
    "recompute policy (none, selective, every:2, full, sqrt) per model depth",
    group=lambda b: " ".join(b.name.split("/")[1:3]), setting=generic_setting,
    columns=MEMORY_COLUMNS + [(category_peak_counter("activations"), "activations peak", "bytes"),
                              ("predicted_activations_peak_bytes", "predicted activations", "bytes"),
                              ("tokens_per_s", "tokens/s", "rate")],
    order=3, technique_order=1,
    tradeoff=(category_peak_counter("activations"), "activations peak (MiB)"),
    summary_baseline="none")


@claim("Activation checkpointing saves 30-50% of memory for 20-30% more time", SUITE,
       "full recompute vs none, every depth: peak allocated at least 30% lower, step time at most 30% longer")
def checkpointing_saves_30_50(f: ResultFolder, c: Claim) -> None:
    parts, oks = [], []
    for group, runs in table(f, SUITE).items():
        if "none" in runs and "full" in runs:
            none, full = runs["none"], runs["full"]
            saving = -pct(full.counter(PEAK_ALLOCATED), none.counter(PEAK_ALLOCATED))
            overhead = pct(full.real_time_ms, none.real_time_ms)
            c.numbers[f"{group} saving %"], c.numbers[f"{group} overhead %"] = saving, overhead
            time_ok = is_less(full, none, 1.30)
            oks.append(all_hold([saving >= 30, time_ok]))
            parts.append(f"{group}: memory -{saving:.1f}%, time {fmt_percent(overhead)}{noise_note(time_ok, full, none)}")
    if oks:
        c.verdict, c.measured = verdict(all_hold(oks)), "; ".join(parts)


@claim("sqrt(L) checkpointing: less activation memory for about one extra forward pass (+33% time)",
       SUITE, "sqrt vs none, every depth: activation peak lower, step time at most 50% longer")
def sqrt_checkpointing(f: ResultFolder, c: Claim) -> None:
    parts, oks = [], []
    for group, runs in table(f, SUITE).items():
        if "none" in runs and "sqrt" in runs:
            none, sq = runs["none"], runs["sqrt"]
            saving = -pct(sq.counter(category_peak_counter("activations")), none.counter(category_peak_counter("activations")))
            overhead = pct(sq.real_time_ms, none.real_time_ms)
            c.numbers[f"{group} activation saving %"], c.numbers[f"{group} overhead %"] = saving, overhead
            time_ok = is_less(sq, none, 1.50)
            oks.append(all_hold([saving > 0, time_ok]))
            parts.append(f"{group}: activations -{saving:.1f}%, time {fmt_percent(overhead)}{noise_note(time_ok, sq, none)}")
    if oks:
        c.verdict, c.measured = verdict(all_hold(oks)), "; ".join(parts)
