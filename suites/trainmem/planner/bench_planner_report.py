"""How the report (reports/trainmem_report) presents bench_planner (bench_planner.cpp): the planner's
predicted step times against steps measured on this CPU, their agreement, and how long a plan takes."""
from reports.trainmem_report.presentation import Suite, args, plain
from reports.trainmem_report.results import Benchmark


# BM_PredictedStep/ranks:<N>/config:<flags>, BM_PredictionAgreement/ranks:<N>, BM_Plan/<model>/<gpu>/N<ranks>.
def _group(b: Benchmark) -> str:
    family = b.name.split("/")[0]
    if family == "BM_Plan":
        return "Plan (a whole search, GPU catalog)"
    ranks = args(b).get("ranks", "?")
    return f"{plain(family)}, {ranks} rank{'' if ranks == '1' else 's'}"


def _setting(b: Benchmark) -> str:
    parts = b.name.split("/")
    if parts[0] == "BM_Plan":
        return "/".join(parts[1:])
    return args(b).get("config", "all configurations")


SUITE = Suite(
    "planner", "The planner (`trainmem plan`)", "bench_planner",
    "each configuration's step time as `trainmem plan` predicts it (its meta run's kernels, copies and "
    "collectives timed by this machine's calibration) beside the step measured on the CPU backend "
    "(the time column); the agreement over them (median |error|, target 15%; Spearman's rank "
    "correlation, target 0.9); and the time a whole plan for a GPU cluster takes",
    group=_group, setting=_setting,
    columns=[("predicted_step_ms", "predicted step (ms)", "number"), ("measured_step_ms", "measured step (ms)", "number"),
             ("error_pct", "error (%)", "number"), ("median_abs_error_pct", "median |error| (%)", "number"),
             ("spearman", "Spearman", "number"), ("configurations", "configurations", "number"),
             ("mixes", "mixes", "number"), ("meta_runs", "meta runs", "number"),
             ("best_predicted_step_ms", "best predicted step (ms)", "number")],
    rank_by_time=False,
    order=13)
