"""How the report (reports/trainmem_report) presents bench_planner (bench_planner.cpp): the planner's
predicted step times against steps measured on this CPU, their agreement, and how long a plan takes."""
import statistics

from reports.trainmem_report.document import Table
from reports.trainmem_report.presentation import Suite, args, plain
from reports.trainmem_report.results import Benchmark, ResultFolder


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


def _ranks(values: list[float]) -> list[int]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0] * len(values)
    for rank, i in enumerate(order):
        ranks[i] = rank
    return ranks


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation, 1 - 6 sum d^2 / (n (n^2 - 1)), as bench_planner computes it
    per rank count (planner/prediction_check.h); here over the runs of every rank count together."""
    n = len(a)
    d2 = sum((x - y) ** 2 for x, y in zip(_ranks(a), _ranks(b)))
    return 1 - 6 * d2 / (n * (n * n - 1))


def recorded_target(runs: list[Benchmark]) -> tuple[float, float] | None:
    """The planner's target (median |error| in percent, Spearman) as the results record it: bench_planner
    writes kTarget (planner/prediction_check.h) beside each agreement, BM_PredictionAgreement's
    target_median_abs_error_pct and target_spearman. None if no agreement in the results has it."""
    for b in runs:
        if b.name.startswith("BM_PredictionAgreement/"):
            error, rho = b.counters.get("target_median_abs_error_pct"), b.counters.get("target_spearman")
            if error is not None and rho is not None:
                return error, rho
    return None


def agreement_table(folder: ResultFolder, suite: Suite) -> list[Table]:
    """The agreement over every checked configuration, one process and mpirun's ranks together: the
    set the planner's target is stated for; and whether it met the target the results record."""
    runs = folder.runs(suite.bench)
    steps = [b for b in runs if b.name.startswith("BM_PredictedStep/")
             and "predicted_step_ms" in b.counters and b.counters.get("measured_step_ms", 0) > 0]
    if len(steps) < 3:
        return []
    predicted = [b.counters["predicted_step_ms"] for b in steps]
    measured = [b.counters["measured_step_ms"] for b in steps]
    error = statistics.median(abs(p - m) / m for p, m in zip(predicted, measured))
    rho = spearman(predicted, measured)
    target = recorded_target(runs)
    if target is None:
        target_text, met = "not in these results (BM_PredictionAgreement records it)", "-"
    else:
        target_text = f"median |error| ≤ {target[0]:g}%, Spearman ≥ {target[1]:g}"
        met = "yes" if 100 * error <= target[0] and rho >= target[1] else "no"
    ranks = sorted({args(b).get("ranks", "?") for b in steps})
    return [Table(["configurations", "rank counts", "median |error|", "Spearman", "target", "target met"],
                  [[str(len(steps)), ", ".join(ranks), f"{100 * error:.1f}%", f"{rho:.3f}", target_text, met]],
                  caption="Predicted against measured step time over every configuration checked, all rank counts together")]


SUITE = Suite(
    "planner", "The planner: trainmem plan", "bench_planner",
    "each configuration's step time as `trainmem plan` predicts it (its meta run's kernels, copies and "
    "collectives timed by this machine's calibration) beside the step measured on the CPU backend "
    "(the time column); the agreement over them (median |error| and Spearman's rank correlation) and "
    "whether it met the planner's target; and the time a whole plan for a GPU cluster takes",
    group=_group, setting=_setting,
    columns=[("predicted_step_ms", "predicted step (ms)", "number"), ("measured_step_ms", "measured step (ms)", "number"),
             ("error_pct", "error (%)", "number")],
    details=[("The agreement per rank count (planner/prediction_check.h)", "BM_PredictionAgreement/",
              [("median_abs_error_pct", "median |error| (%)", "number"), ("spearman", "Spearman", "number"),
               ("configurations", "configurations", "number")]),
             ("A whole plan for a GPU cluster (how long it took: the table above)", "BM_Plan/",
              [("mixes", "mixes", "number"), ("meta_runs", "meta runs", "number"), ("fitting", "fitting", "number"),
               ("best_predicted_step_ms", "best predicted step (ms)", "number")])],
    rank_by_time=False,
    tables=agreement_table,
    order=13)
