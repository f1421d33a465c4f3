"""Input that is malformed, not a regular file, too large or non-finite (issue 25, items 2-4): the
report names the file and what is wrong, shows the rest, and never hangs or shows a traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc

from conftest import REPO, md_text, time_limit
from reports.trainmem_report.__main__ import main
from reports.trainmem_report.input_file import MAX_INPUT_BYTES
from reports.trainmem_report.results import load_folder


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
    set_counter(fixture_copy, "bench_zero.json", "world_size", float("inf"))  # int(inf) crashed the claims
    set_counter(fixture_copy, "bench_checkpointing.json", "peak_allocated_bytes", float("nan"))
    data = json.loads((fixture_copy / "bench_baseline.json").read_text())
    data["benchmarks"][0]["real_time"] = float("-inf")
    (fixture_copy / "bench_baseline.json").write_text(json.dumps(data))
    run = render_cli(fixture_copy)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    missing = missing_section(fixture_copy)
    assert "bench_zero.json: BM_Zero/small/N1/zero0/offload_none: world_size is inf, not a finite number: " \
           "left out" in missing
    assert "bench_checkpointing.json: BM_Recompute/small/L4/none: peak_allocated_bytes is nan, not a finite " \
           "number: left out" in missing
    assert "bench_baseline.json: BM_TrainStep/tiny: real_time is -inf, not a finite number: run left out" in missing
    folder = load_folder(fixture_copy)
    entries = len(json.loads((fixture_copy / "bench_zero.json").read_text())["benchmarks"])
    assert len([b for b in folder.runs("bench_zero") if "world_size" not in b.counters]) == entries


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
