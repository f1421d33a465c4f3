"""Input that is malformed, not a regular file, too large or non-finite (issue 25, items 2-4): the
report names the file and what is wrong, shows the rest, and never hangs or shows a traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc

import pytest

from conftest import REPO, cases, md_text, section_tables, time_limit
from reports.trainmem_report import compare, plots
from reports.trainmem_report.__main__ import main
from reports.trainmem_report.input_file import MAX_INPUT_BYTES
from reports.trainmem_report.results import load_folder
from reports.trainmem_report.suites import suite_for


def render_cli(folder) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reports.trainmem_report", "render", str(folder)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def missing_section(folder) -> str:
    return md_text((folder / "summary.md").read_text()).split("## Missing from these results", 1)[1]


def test_a_device_json_of_the_wrong_shape_is_named_and_left_out(fixture_copy):
    (fixture_copy / "device.json").write_text(json.dumps({"device": [1, 2], "allocator": "caching"}))
    run = render_cli(fixture_copy)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    missing = missing_section(fixture_copy)
    assert "device.json: 'device' is a list, not an object: left out" in missing
    assert "device.json: 'allocator' is a string, not an object: left out" in missing
    # the device still comes from the benchmarks' context, as when device.json is absent
    assert (fixture_copy / "summary.md").read_text().startswith("# trainmem report: CPU (AMD EPYC)")


def test_a_device_field_that_is_not_a_number_is_named_and_left_out(fixture_copy):
    info = json.loads((fixture_copy / "device.json").read_text())
    info["device"]["device_memory_bytes"] = "lots"
    info["device"]["cpu_cores"] = {"n": 2}
    (fixture_copy / "device.json").write_text(json.dumps(info))
    folder = load_folder(fixture_copy)
    assert "device_memory_bytes" not in folder.device and "cpu_cores" not in folder.device
    assert "device.json: device.device_memory_bytes is 'lots', not a number: left out" in folder.problems
    assert "device.json: device.cpu_cores is {'n': 2}, not a number: left out" in folder.problems
    assert main(["render", str(fixture_copy)]) == 0


def set_counter(folder, file: str, counter: str, value: float) -> None:
    data = json.loads((folder / file).read_text())
    for entry in data["benchmarks"]:
        entry[counter] = value
    (folder / file).write_text(json.dumps(data))  # NaN and Infinity, as Google Benchmark writes them


def test_infinite_and_nan_counters_are_flagged_never_a_crash(fixture_copy):
    set_counter(fixture_copy, "bench_zero.json", "stage", float("inf"))  # int(inf) crashed the claims
    set_counter(fixture_copy, "bench_checkpointing.json", "peak_allocated_bytes", float("nan"))
    data = json.loads((fixture_copy / "bench_baseline.json").read_text())
    data["benchmarks"][0]["real_time"] = float("-inf")
    (fixture_copy / "bench_baseline.json").write_text(json.dumps(data))
    run = render_cli(fixture_copy)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    missing = missing_section(fixture_copy)
    assert "bench_zero.json: BM_Zero/small/N1/zero0/offload_none: stage is inf, not a finite number: " \
           "left out" in missing
    assert "bench_checkpointing.json: BM_Recompute/small/L4/none: peak_allocated_bytes is nan, not a finite " \
           "number: left out" in missing
    assert "bench_baseline.json: BM_TrainStep/tiny/real_time: real_time is -inf, not a finite number: run left out" \
        in missing  # one repetition's entry: the case is still shown, from its median
    folder = load_folder(fixture_copy)
    entries = len(cases(json.loads((fixture_copy / "bench_zero.json").read_text())["benchmarks"]))
    assert len([b for b in folder.runs("bench_zero") if "stage" not in b.counters]) == entries


@pytest.mark.parametrize("world_size", ["inf", "0", "-2", "two", "", 2.5, None])
def test_a_world_size_that_is_not_a_count_leaves_its_file_out(fixture_copy, world_size):
    """The ranks a file ran on are its context's trainmem.world_size, text of a whole number >= 1
    (ranked_benchmark_main.h): anything else leaves the file out, saying so, and never a crash."""
    data = json.loads((fixture_copy / "bench_zero-n2.json").read_text())
    data["context"]["trainmem.world_size"] = world_size
    (fixture_copy / "bench_zero-n2.json").write_text(json.dumps(data))
    folder = load_folder(fixture_copy)
    assert f"bench_zero-n2.json: context trainmem.world_size is {world_size!r}, not a whole number of at least 1: " \
           "file left out" in folder.problems
    assert all(b.world_size == 1 for b in folder.runs("bench_zero"))  # bench_zero.json's runs only
    assert render_cli(fixture_copy).returncode == 0


def test_a_number_too_large_for_a_float_is_flagged(fixture_copy):
    text = (fixture_copy / "bench_baseline.json").read_text()
    assert '"iterations": 1,' in text
    (fixture_copy / "bench_baseline.json").write_text(text.replace('"iterations": 1,', '"iterations": 1, '
                                                                   '"huge_count": 1' + "0" * 400 + ","))
    folder = load_folder(fixture_copy)
    assert any("huge_count is too large for a float" in p for p in folder.problems), folder.problems


def test_a_fifo_is_not_read(fixture_copy):
    """Opening a FIFO for reading waits for a writer: forever. Only regular files are read."""
    for name in ("bench_baseline.json", "memory-snapshot.json", "train-baseline.json"):
        (fixture_copy / name).unlink()
        os.mkfifo(fixture_copy / name)
    (fixture_copy / "bench_zero-n2.json").unlink()
    (fixture_copy / "bench_zero-n2.json").mkdir()
    with time_limit(60):
        assert main(["render", str(fixture_copy)]) == 0
    missing = missing_section(fixture_copy)
    assert "bench_baseline.json: not a regular file (a FIFO): not read" in missing
    assert "train-baseline.json: not a regular file (a FIFO): not read" in missing
    assert "memory-snapshot.json: not a regular file (a FIFO): not read" in missing
    assert "bench_zero-n2.json: not a regular file (a folder): not read" in missing


def test_a_link_to_a_device_is_not_read(fixture_copy):
    (fixture_copy / "train-baseline.json").unlink()
    (fixture_copy / "train-baseline.json").symlink_to("/dev/zero")  # endless
    with time_limit(60):
        folder = load_folder(fixture_copy)
    assert "train-baseline.json: not a regular file (a character device): not read" in folder.problems


def test_a_file_over_the_limit_is_refused_without_reading_it(fixture_copy):
    """A sparse file four times the limit: refused by its size, so memory stays far below it."""
    with open(fixture_copy / "memory-trace.json", "wb") as f:
        f.truncate(4 * MAX_INPUT_BYTES)
    tracemalloc.start()
    try:
        folder = load_folder(fixture_copy)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    limit_mib = MAX_INPUT_BYTES // 2**20
    assert f"memory-trace.json: {4 * limit_mib}.0 MiB, more than the {limit_mib} MiB a result file may be: " \
           "not read" in folder.problems
    assert peak < MAX_INPUT_BYTES // 4, peak
    assert folder.trace is None


def test_a_deeply_nested_file_is_malformed_not_a_crash(fixture_copy):
    (fixture_copy / "bench_baseline.json").write_text("[" * 100_000 + "]" * 100_000)
    folder = load_folder(fixture_copy)
    assert any(p == "bench_baseline.json: unreadable, not JSON (nested too deeply)" for p in folder.problems), \
        folder.problems


def many_settings(fixture_copy, folder, count: int):
    """A results folder whose baseline suite has one group of `count` settings."""
    folder.mkdir()
    data = json.loads((fixture_copy / "bench_baseline.json").read_text())
    entry = data["benchmarks"][0]
    data["benchmarks"] = [dict(entry, name=f"BM_TrainStep/tiny/s{i}", real_time=1.0 + i) for i in range(count)]
    (folder / "bench_baseline.json").write_text(json.dumps(data))
    (folder / "device.json").write_text((fixture_copy / "device.json").read_text())
    return folder


def test_a_group_too_large_to_plot_keeps_its_table_and_says_why_it_has_no_plot(fixture_copy, tmp_path):
    """1,000 settings in a group (0.7 MB, well within the size limit) took 65 s to plot, their labels
    mostly; time grew with the file. Now a plot has at most plots.MAX_DRAWN things to label."""
    folder = many_settings(fixture_copy, tmp_path / "many", 1000)
    assert main(["render", str(folder)]) == 0
    summary = md_text((folder / "summary.md").read_text())
    assert f"Baseline training step, category bars: 1000 settings, more than the {plots.MAX_DRAWN} a plot can " \
           "show: not drawn" in summary
    _, rows = section_tables(summary, "Baseline training step (bench_baseline)")[0]
    assert len(rows) == 1000
    assert not list((folder / "plots").glob("baseline-*.png"))


def test_a_group_too_large_to_rank_is_listed_as_not_compared(fixture_copy, tmp_path):
    """Rankings compare every pair of a group's settings: time grew with the square of their count."""
    count = compare.MAX_RANKED + 1
    folders = [load_folder(many_settings(fixture_copy, tmp_path / name, count)) for name in ("a", "b")]
    rows = compare.ranking_differences(folders, suite_for("bench_baseline"))
    assert rows == [["Baseline training step", "train step", "not compared", "-", "-",
                     f"{count} settings, more than the {compare.MAX_RANKED} whose rankings are compared"]]


def test_a_run_with_null_losses_is_named_and_the_other_runs_are_shown(fixture_copy):
    """`trainmem train --json` writes a NaN loss as null. One run with null losses names the run and
    the field; every run keeps its row in "Training runs", the loss curves are drawn (issue 40, item 19)."""
    path = fixture_copy / "train-precision-fp16.json"
    run = json.loads(path.read_text())
    run["steps"][0]["loss"] = None
    run["steps"][4]["loss"] = None
    run["memory"]["peak_allocated_bytes"] = "lots"
    path.write_text(json.dumps(run))
    assert main(["render", str(fixture_copy)]) == 0
    summary = (fixture_copy / "summary.md").read_text()
    [(header, rows)] = section_tables(summary, "Training runs (trainmem train)")
    names = sorted(p.stem[len("train-"):] for p in fixture_copy.glob("train-*.json"))
    assert sorted(r[0] for r in rows) == names
    fp16 = next(r for r in rows if r[0] == "precision-fp16")
    assert fp16[1:5] == [str(len(run["steps"])), "-", f"{run['steps'][-1]['loss']:.4f}", "-"]
    missing = missing_section(fixture_copy)
    assert "train-precision-fp16.json: steps[0].loss is null (and 1 more of its 10 steps)" in missing
    assert "train-precision-fp16.json: memory.peak_allocated_bytes is a string" in missing
    assert "training runs: could not be drawn" not in missing
    assert (fixture_copy / "plots" / "precision-loss.png").stat().st_size > 2000
