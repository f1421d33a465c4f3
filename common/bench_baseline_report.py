"""How the report (reports/trainmem_report) presents bench_baseline (bench/bench_baseline.cpp): one
training step without any memory technique. Its `small` step is the run "Techniques side by side"
measures every technique against."""
from reports.trainmem_report.presentation import MEMORY_COLUMNS, Suite, words

SUITE = Suite(
    "baseline", "Baseline training step", "bench_baseline",
    "one training step without any memory technique",
    group=lambda b: "train step", setting=lambda b: words(b)[1] if len(words(b)) > 1 else b.name,
    columns=MEMORY_COLUMNS + [("tokens_per_s", "tokens/s", "rate"), ("TFLOP_per_s", "TFLOP/s", "number")],
    rank_by_time=False,
    order=1,
    summary_reference="BM_TrainStep/small")  # small B=4 fp32, the plain step of this preset
