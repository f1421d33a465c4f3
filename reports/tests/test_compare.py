"""Several machines side by side. The second machine is the committed CPU fixture relabelled as a
GPU (no GPU results exist yet), with the mixed-precision step times set by hand on both: fp32 100
ms, bf16 150 ms, fp16 200 ms on the CPU; fp32 and bf16 exchanged on the "GPU" (a real quick run
may put fp32 and bf16 closer than the 5% the comparison calls noise). The comparison must show both
devices and flag exactly the rankings that differ."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from reports.trainmem_report import compare
from reports.trainmem_report.__main__ import main
from reports.trainmem_report.results import load_folder
from reports.trainmem_report.suites import SUITES


@pytest.fixture
def two_machines(fixture_copy, tmp_path):
    gpu = tmp_path / "gpu-run"
    shutil.copytree(fixture_copy, gpu)
    info = json.loads((gpu / "device.json").read_text())
    info["device"].update(kind="cuda", name="Test GPU 80GB", driver_version="999.1", runtime_version="13.0",
                          total_memory_bytes=80 * 2**30)
    (gpu / "device.json").write_text(json.dumps(info))
    for folder, times in ((fixture_copy, {"fp32": 100, "bf16": 150, "fp16": 200}),
                          (gpu, {"fp32": 150, "bf16": 100, "fp16": 200})):
        mp = json.loads((folder / "bench_mixed_precision.json").read_text())
        for b in mp["benchmarks"]:
            b["real_time"], b["time_unit"] = times[b["name"].rsplit("/", 1)[1]], "ms"
        (folder / "bench_mixed_precision.json").write_text(json.dumps(mp))
    return fixture_copy, gpu


def test_rankings_that_differ_are_flagged_and_only_those(two_machines):
    cpu, gpu = (load_folder(p) for p in two_machines)
    rows = [r for s in SUITES if cpu.runs(s.bench) for r in compare.ranking_differences([cpu, gpu], s)]
    assert [(r[0], r[2]) for r in rows] == [("Mixed precision", "time")], rows
    assert "fp32" in rows[0][3] and "Test GPU 80GB" in rows[0][4]


def test_comparison_page_shows_devices_side_by_side(two_machines, tmp_path):
    out = tmp_path / "compare"
    assert main(["render", str(two_machines[0]), str(two_machines[1]), "-o", str(out)]) == 0
    summary = (out / "summary.md").read_text()
    assert "| results | device | kind | memory (CPU: budget) | driver |" in summary
    assert "Test GPU 80GB" in summary and "999.1" in summary and "80.00 GiB" in summary
    assert "## Where the ranking of techniques differs between devices" in summary
    assert "Mixed precision | small | time |" in summary
    line = next(l for l in summary.splitlines() if l.startswith("| Mixed precision makes training faster"))
    assert line.rstrip().endswith("| differs |")
    # each device's own plots, side by side, and files only where they exist
    page = (out / "index.html").read_text()
    assert page.count("data:image/png;base64,") >= 10
    for ref in re.findall(r'href="([^"#][^"]*)"', page):
        assert (out / ref).is_file(), ref
    assert len(list((out / "plots").rglob("*.png"))) >= 10
