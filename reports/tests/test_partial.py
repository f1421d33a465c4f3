"""A malformed or partial results folder gives a report of what is there and a clear list of what
is missing: never a stack trace."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

from conftest import REPO, md_text
from reports.trainmem_report.__main__ import main


def missing_section(folder) -> str:
    summary = md_text((folder / "summary.md").read_text())
    return summary.split("## Missing from these results", 1)[1]


def test_damaged_folder_reports_what_is_there_and_lists_the_rest(fixture_copy, capsys):
    (fixture_copy / "bench_checkpointing.json").write_text('{"context": {}, "benchmarks": [{"name": "BM_Rec')
    (fixture_copy / "bench_accumulation.json").unlink()
    (fixture_copy / "train-precision-bf16.json").write_text(json.dumps({"hello": 1}))
    (fixture_copy / "memory-trace.json").write_text(json.dumps({"phases": [], "events": []}))
    mp = json.loads((fixture_copy / "bench_mixed_precision.json").read_text())
    for e in mp["benchmarks"]:  # bf16 loses a counter a claim needs, in every repetition
        if e.get("run_name", e["name"]).endswith("/bf16/real_time"):
            del e["activations_peak_bytes"]
    (fixture_copy / "bench_mixed_precision.json").write_text(json.dumps(mp))

    assert main(["render", str(fixture_copy)]) == 0
    missing = missing_section(fixture_copy)
    assert "bench_checkpointing.json: unreadable" in missing
    assert "bench_accumulation.json: not in this folder" in missing
    assert "train-precision-bf16.json: not a `trainmem train --json` result" in missing
    assert "memory timeline: could not be drawn" in missing
    summary = (fixture_copy / "summary.md").read_text()
    # what is intact is still reported
    assert "## Baseline training step (bench_baseline)" in summary
    assert "## Mixed precision (bench_mixed_precision)" in summary
    line = next(l for l in summary.splitlines() if l.startswith("| bf16 halves activation memory"))
    assert "not measured" in line and "malformed" in line
    line = next(l for l in summary.splitlines() if l.startswith("| Activation checkpointing saves"))
    assert "not measured" in line
    assert "Traceback" not in capsys.readouterr().out
    assert (fixture_copy / "index.html").stat().st_size > 1000


def test_empty_folder_lists_everything_as_missing(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["render", str(empty)]) == 0
    missing = missing_section(empty)
    for name in ("device.json", "bench_baseline.json", "bench_zero.json", "memory-trace.json", "train-*.json"):
        assert name in missing


def test_device_json_missing_takes_the_device_from_the_benchmarks(fixture_copy):
    (fixture_copy / "device.json").unlink()
    assert main(["render", str(fixture_copy)]) == 0
    summary = (fixture_copy / "summary.md").read_text()
    assert summary.startswith("# trainmem report: CPU (")
    assert "device.json: missing" in missing_section(fixture_copy)


def test_command_line_on_a_partial_folder_exits_cleanly(fixture_copy, tmp_path):
    partial = tmp_path / "partial"
    partial.mkdir()
    shutil.copy(fixture_copy / "bench_baseline.json", partial)
    (partial / "bench_flash_attention.json").write_text("not json at all")
    run = subprocess.run([sys.executable, "-m", "reports.trainmem_report", "render", str(partial)],
                         cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    assert "bench_flash_attention.json: unreadable" in run.stdout


def test_a_folder_that_does_not_exist_is_a_one_line_error(tmp_path):
    run = subprocess.run([sys.executable, "-m", "reports.trainmem_report", "render", str(tmp_path / "nope")],
                         cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip() == f"trainmem report: error: {tmp_path / 'nope'} is not a folder"
