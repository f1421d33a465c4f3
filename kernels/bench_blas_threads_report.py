"""How the report (reports/trainmem_report) presents bench_blas_threads (bench/bench_blas_threads.cpp):
the CPU linear layer on one OpenBLAS thread or all of them."""
from reports.trainmem_report.presentation import Suite, args, words
from reports.trainmem_report.results import Benchmark


# BM_Linear/<model>/<N>x<C>x<OC>/blas_threads:<1|all>.
def _group(b: Benchmark) -> str:
    return " ".join(words(b)[1:3])


def _setting(b: Benchmark) -> str:
    return f"blas_threads:{args(b).get('blas_threads', '?')}"


SUITE = Suite(
    "blas_threads", "CPU linear layer: one BLAS thread or all", "bench_blas_threads",
    "the fp32 linear layer (forward and backward) at the products of the models trainmem trains, on one "
    "OpenBLAS thread and on all of them: where a second thread starts to pay (kernels/cpu/blas_threads.h)",
    group=_group, setting=_setting,
    columns=[("mnk", "N·C·OC", "number"), ("blas_threads", "threads", "number")],
    order=14)
