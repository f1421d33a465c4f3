"""How the report (reports/trainmem_report) presents bench_gradient_memory: how long a gradient
lives, per mode, and a table of each mode against persistent gradients."""
from reports.trainmem_report import noise
from reports.trainmem_report.document import Table, fmt_bytes
from reports.trainmem_report.presentation import MEMORY_COLUMNS, Suite, words
from reports.trainmem_report.report import grouped
from reports.trainmem_report.results import ResultFolder
from reports.trainmem_report.result_schema import PEAK_ALLOCATED, category_peak_counter


def against_persistent(folder: ResultFolder, suite: Suite) -> list[Table]:
    """Each mode against persistent gradients in the same group: what it saves at the peak and
    between steps, beside G (persistent's gradients peak: every gradient at once), and its time."""
    rows = []
    for group, runs in grouped(folder, suite).items():
        base = dict(runs).get("persistent")
        if base is None:
            continue
        for setting, b in runs:
            if b is base:
                continue
            saved = [base.counter(key) - b.counter(key) for key in (PEAK_ALLOCATED, "held_between_steps_bytes")]
            rows.append([group, setting, *map(fmt_bytes, saved), fmt_bytes(base.counter(category_peak_counter("gradients"))),
                         f"{b.real_time_ms / base.real_time_ms:.2f}", noise.ordering(b, base)])
    if not rows:
        return []
    return [Table(["group", "mode", "peak allocated saved", "held between steps saved", "G (all gradients)",
                   "time / persistent's", "time against persistent"], rows,
                  caption="Against persistent gradients (a mode that frees every gradient after the step saves "
                          "exactly G between steps)")]


# BM_Grads/<model>/<mode>, one case per way of holding the gradients (persistent, on-demand, and
# whatever mode the benchmark adds, e.g. in-backward); the label names the batch: "small B=4 grads=...".
SUITE = Suite(
    "gradient_memory", "Gradient memory", "bench_gradient_memory",
    "how long a gradient lives, per mode: peak, bytes held between steps, step time",
    group=lambda b: b.label.split(" grads=")[0] if " grads=" in b.label else words(b)[1],
    setting=lambda b: words(b)[-1],
    columns=MEMORY_COLUMNS + [(category_peak_counter("gradients"), "gradients peak", "bytes"),
                              ("held_between_steps_bytes", "held between steps", "bytes"),
                              ("tokens_per_s", "tokens/s", "rate")],
    explain="persistent: the gradients are allocated with the model and zeroed after each step "
            "(PyTorch's zero_grad(set_to_none=False)), G bytes at every moment. on-demand: each gradient "
            "is made, zeroed, at its first write in the backward and freed after the optimizer step "
            "(set_to_none=True): nothing between steps, and at a moment in the backward only the "
            "gradients written so far; while the peak stays at the LM head's backward (which writes the "
            "tied wte's gradient first), peak = persistent's peak - G + round(wte's gradient). "
            "in-backward (--optimizer-in-backward): each parameter's AdamW update runs as soon as its "
            "gradient is complete and frees it, so at most the root's and one layer's gradients exist "
            "together. G is the gradients' bytes: 4 per parameter in fp32, 2 in bf16/fp16, each tensor "
            "rounded to 512 bytes (persistent's gradients peak). Proofs and figures: suites/gradient_memory/README.md.",
    order=4, technique_order=3,
    tradeoff=(PEAK_ALLOCATED, "peak allocated (MiB)"),
    tables=against_persistent,
    summary_baseline="persistent")
