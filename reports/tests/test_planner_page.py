"""The report's section for suites/trainmem/planner (bench_planner): a row per checked
configuration with its predicted and measured step, and the agreement over every configuration
of every rank count together (bench_planner.json at one process, bench_planner-n2.json under
mpirun), worked by hand: errors +12.5%, -25% and +100% give a median |error| of 25%, and ranks
(0 1 2) predicted against (0 2 1) measured give Spearman 1 - 6*2/(3*8) = 0.5."""
from __future__ import annotations

import json
import shutil

from conftest import FIXTURE, section_tables
from reports.trainmem_report.__main__ import main

SECTION = "The planner: trainmem plan (bench_planner)"


def step(ranks: int, config: str, predicted: float, measured: float) -> dict:
    name = f"BM_PredictedStep/ranks:{ranks}/config:{config}/iterations:1/manual_time"
    return {"name": name, "run_name": name, "run_type": "iteration", "repetitions": 1, "repetition_index": 0,
            "threads": 1, "iterations": 1, "real_time": measured, "cpu_time": measured, "time_unit": "ms",
            "predicted_step_ms": predicted, "measured_step_ms": measured,
            "error_pct": 100 * (predicted - measured) / measured, "label": f"--model {config}"}


def render(folder, files: dict[str, list[dict]]) -> str:
    shutil.copy(FIXTURE / "device.json", folder)
    context = json.loads((FIXTURE / "bench_gradient_memory.json").read_text())["context"]
    for name, benchmarks in files.items():
        (folder / name).write_text(json.dumps({"context": context, "benchmarks": benchmarks}))
    assert main(["render", str(folder)]) == 0
    return (folder / "summary.md").read_text()


def test_the_agreement_is_over_every_rank_count_together(tmp_path):
    summary = render(tmp_path, {"bench_planner.json": [step(1, "tiny", 1.125, 1.0), step(1, "small", 1.5, 2.0)],
                                "bench_planner-n2.json": [step(2, "tiny,zero=3", 3.0, 1.5)]})
    tables = section_tables(summary, SECTION)
    header, rows = tables[-1]
    assert header == ["configurations", "rank counts", "median |error|", "Spearman", "target"]
    assert rows == [["3", "1, 2", "25.0%", "0.500", "15%, 0.9"]]


def test_no_agreement_is_drawn_from_fewer_than_three_configurations(tmp_path):
    summary = render(tmp_path, {"bench_planner.json": [step(1, "tiny", 1.125, 1.0), step(1, "small", 1.5, 2.0)]})
    assert all(header[0] != "configurations" for header, _ in section_tables(summary, SECTION))
