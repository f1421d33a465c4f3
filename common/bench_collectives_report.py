"""How the report (reports/trainmem_report) presents bench_collectives (bench/bench_collectives.cpp):
the communicator's collectives, nccl-tests style."""
from reports.trainmem_report.document import fmt_size
from reports.trainmem_report.presentation import Suite

# all_reduce/<dtype>/<bytes>, one file per world size (mpirun -np N, its context says N); nccl-tests' columns.
SUITE = Suite(
    "collectives", "Collectives (the communicator)", "bench_collectives",
    "all-reduce, reduce-scatter, all-gather and broadcast per buffer size, nccl-tests' bus bandwidth",
    group=lambda b: f"{' '.join(b.name.split('/')[:2])} N={b.world_size}",
    setting=lambda b: fmt_size(float(b.name.split("/")[2])),
    columns=[("busbw", "bus bandwidth", "bandwidth"), ("algbw", "algorithm bandwidth", "bandwidth"),
             ("wrong", "#wrong", "number")],
    rank_by_time=False,
    order=11)
