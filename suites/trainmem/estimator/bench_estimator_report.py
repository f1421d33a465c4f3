"""How the report (reports/trainmem_report) presents bench_estimator (bench_estimator.cpp): how long
an estimate takes."""
from reports.trainmem_report.presentation import Suite, plain
from reports.trainmem_report.results import Benchmark


# BM_MetaRun/<model>, BM_Estimate/<model>, BM_MetaRunSharded/<sharding technique>/<ranks> (and /llama3-70b_128k/<technique>/<ranks>).
def _group(b: Benchmark) -> str:
    parts = b.name.split("/")
    return f"{plain(parts[0])} {parts[1]}" if parts[0] == "BM_MetaRunSharded" else plain(parts[0])


def _setting(b: Benchmark) -> str:
    parts = b.name.split("/")
    return f"N={parts[2]}" if parts[0] == "BM_MetaRunSharded" and len(parts) > 2 else parts[1]


SUITE = Suite(
    "estimator", "The estimator (meta runs)", "bench_estimator",
    "how long an estimate takes: the meta run per model, `trainmem estimate`, and rank 0's sharded meta run "
    "per world size (no memory or kernels: the time is the estimator's own)",
    group=_group, setting=_setting,
    columns=[("parameters", "parameters", "number"), ("peak_allocated", "peak allocated (estimated)", "bytes"),
             ("peak_reserved", "peak reserved (estimated)", "bytes"), ("allocations", "allocations", "number"),
             ("max_batch", "largest micro-batch", "number")],
    rank_by_time=False,
    order=12)
