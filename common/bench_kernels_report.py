"""How the report (reports/trainmem_report) presents bench_kernels (bench/bench_kernels.cpp): the
kernels of a GPT-2 124M step one at a time, fp32 beside bf16, in TFLOP/s (the GEMMs) and GB/s (the
memory-bound rest), counted from what each kernel's dispatcher declares (kernels/kernel_cost.h)."""
from reports.trainmem_report.presentation import Suite, args, words


# <kernel>/<dtype>/N:<N>/C:<C>[/OC:<OC>|/V:<V>]: the group is the kernel at its shape, the setting its dtype.
def _group(b) -> str:
    return " ".join([words(b)[0]] + [f"{k}={v}" for k, v in args(b).items()])


SUITE = Suite(
    "kernels", "Kernels one at a time", "bench_kernels",
    "the kernels a GPT-2 124M step spends its time in (linear layers, layernorm, cross-entropy over the "
    "50k vocabulary), each alone at the step's sizes, fp32 beside bf16: TFLOP/s for the products, GB/s "
    "(the bytes a kernel must read and write) for the rest, which memory bandwidth bounds",
    group=_group, setting=lambda b: words(b)[1],
    columns=[("TFLOP_per_s", "TFLOP/s", "number"), ("GB_per_s", "GB/s", "number")],
    rank_by_time=False,
    order=15)
