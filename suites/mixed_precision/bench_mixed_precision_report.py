"""How the report (reports/trainmem_report) presents bench_mixed_precision: fp32, bf16 and fp16, and
the claims it tests (one of them on the `trainmem train --precision` runs ci/suite makes)."""
from reports.trainmem_report.claims import (NOT_MEASURABLE_ON_CPU, Claim, claim, noise_note, on_cpu, pct, table,
                                            verdict)
from reports.trainmem_report.document import fmt_bytes, fmt_ms, fmt_percent
from reports.trainmem_report.noise import is_less
from reports.trainmem_report.presentation import MEMORY_COLUMNS, Suite, words
from reports.trainmem_report.results import ResultFolder
from reports.trainmem_report.result_schema import PEAK_ALLOCATED, category_peak_counter

SUITE = Suite(
    "mixed_precision", "Mixed precision", "bench_mixed_precision",
    "fp32, bf16 and fp16 (with dynamic loss scaling)",
    group=lambda b: words(b)[1] if len(words(b)) > 1 else "model", setting=lambda b: words(b)[-1],
    columns=MEMORY_COLUMNS + [(category_peak_counter("parameters"), "parameters", "bytes"),
                              (category_peak_counter("gradients"), "gradients", "bytes"),
                              (category_peak_counter("optimizer_state"), "optimizer state", "bytes"),
                              (category_peak_counter("activations"), "activations peak", "bytes"),
                              ("tokens_per_s", "tokens/s", "rate")],
    order=5, technique_order=2,
    tradeoff=(PEAK_ALLOCATED, "peak allocated (MiB)"),
    summary_baseline="fp32")


@claim("Mixed-precision Adam needs 16 bytes per parameter (2 + 2 + 12)", SUITE,
       "bf16: (parameters + gradients + optimizer state) / parameters within 16 +- 0.5, "
       "the parameter count taken as the fp32 parameter bytes / 4")
def sixteen_bytes_per_parameter(f: ResultFolder, c: Claim) -> None:
    for group, runs in table(f, SUITE).items():
        if "fp32" in runs and "bf16" in runs:
            psi = runs["fp32"].counter(category_peak_counter("parameters"), 0) / 4
            b = runs["bf16"]
            states = sum(b.counter(k, 0) for k in (category_peak_counter("parameters"), category_peak_counter("gradients"),
                                                   category_peak_counter("optimizer_state")))
            if psi:
                per = states / psi
                c.numbers["bytes per parameter"] = per
                c.verdict = verdict(abs(per - 16) <= 0.5)
                c.measured = f"{group}: {fmt_bytes(states)} for {psi:,.0f} parameters = {per:.2f} B/parameter"
            break


@claim("bf16 halves activation memory", SUITE,
       "activation peak bf16 / fp32 at most 0.55")
def bf16_halves_activations(f: ResultFolder, c: Claim) -> None:
    for group, runs in table(f, SUITE).items():
        if "fp32" in runs and "bf16" in runs:
            ratio = runs["bf16"].counter(category_peak_counter("activations")) / runs["fp32"].counter(category_peak_counter("activations"))
            c.numbers["ratio"] = ratio
            c.verdict = verdict(ratio <= 0.55)
            c.measured = (f"{group}: {fmt_bytes(runs['bf16'].counter(category_peak_counter('activations')))} vs "
                          f"{fmt_bytes(runs['fp32'].counter(category_peak_counter('activations')))} (x{ratio:.3f})")
            break


@claim("Mixed precision makes training faster", SUITE,
       "bf16 step time shorter than fp32 on this device (a GPU's 16-bit tensor cores; the CPU backend "
       "converts in software, so on the CPU it is not measurable)")
def mixed_precision_is_faster(f: ResultFolder, c: Claim) -> None:
    for group, runs in table(f, SUITE).items():
        if "fp32" in runs and "bf16" in runs:
            bf16, fp32 = runs["bf16"], runs["fp32"]
            change = pct(bf16.real_time_ms, fp32.real_time_ms)
            c.numbers["bf16 time change %"] = change
            faster = is_less(bf16, fp32)
            c.verdict = NOT_MEASURABLE_ON_CPU if on_cpu(f) else verdict(faster)
            c.measured = (f"{group}: bf16 step {fmt_ms(bf16.real_time_ms)} vs fp32 {fmt_ms(fp32.real_time_ms)} "
                          f"({fmt_percent(change)}){noise_note(faster, bf16, fp32)}")
            if on_cpu(f):
                c.measured += " (CPU backend: no 16-bit arithmetic units to speed up)"
            break


@claim("Training in 16 bits reaches the loss of fp32", SUITE,
       "trainmem train (tiny): mean loss of the last 20% of steps within 2% of fp32's, for bf16 and fp16")
def sixteen_bit_tracks_fp32(f: ResultFolder, c: Claim) -> None:
    def tail_mean(run):
        losses = [s["loss"] for s in run["steps"]]
        tail = losses[len(losses) - max(1, len(losses) // 5):]
        return sum(tail) / len(tail)
    if "precision-fp32" not in f.train_runs:
        return
    reference, parts, oks = tail_mean(f.train_runs["precision-fp32"]), [], []
    for p in ("bf16", "fp16"):
        if f"precision-{p}" in f.train_runs:
            gap = pct(tail_mean(f.train_runs[f"precision-{p}"]), reference)
            c.numbers[f"{p} gap %"] = gap
            oks.append(abs(gap) <= 2)
            parts.append(f"{p} {fmt_percent(gap)}")
    if oks:
        steps = len(f.train_runs["precision-fp32"]["steps"])
        c.verdict = verdict(all(oks))
        c.measured = f"final loss vs fp32 ({reference:.3f}, {steps} steps): " + ", ".join(parts)
