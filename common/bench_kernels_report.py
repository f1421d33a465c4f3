"""How the report (reports/trainmem_report) presents bench_kernels (bench/bench_kernels.cpp): the
kernels of a GPT-2 124M step one at a time, fp32 beside bf16, in TFLOP/s (the GEMMs) and GB/s (the
memory-bound rest), counted from what each kernel's dispatcher declares (kernels/kernel_cost.h); and
on the CPU a whole step split by kernel (BM_StepByKernel)."""
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
    details=[("A CPU training step by kernel (ms a step)", "BM_StepByKernel/",
              [("step_ms", "step", "number"), ("gemm_ms", "GEMMs", "number"), ("attention_ms", "attention", "number"),
               ("memory_ms", "memory-bound kernels", "number"), ("matmul_forward_ms", "matmul fwd", "number"),
               ("matmul_backward_ms", "matmul bwd", "number"),
               ("cross_entropy_forward_backward_ms", "cross-entropy (fwd + bwd, fused)", "number"),
               ("adamw_update_ms", "AdamW", "number"), ("outside_kernels_ms", "outside kernels", "number")])],
    rank_by_time=False,
    order=15)
