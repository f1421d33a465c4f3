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

from conftest import cases, section_tables
from reports.trainmem_report import compare
from reports.trainmem_report.__main__ import main
from reports.trainmem_report.document import fmt_bytes
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
        for b in mp["benchmarks"]:  # every repetition and the median at the time; a spread of 1 ms
            setting = b.get("run_name", b["name"]).removesuffix("/real_time").rsplit("/", 1)[1]
            b["real_time"], b["time_unit"] = (1 if b.get("aggregate_name") == "stddev" else times[setting]), "ms"
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


def test_two_folders_of_the_same_name_each_keep_their_own_plots_and_columns(fixture_copy, tmp_path):
    """`render a/same b/same` (issue 25): both devices' plots went to plots/same/, so the first
    device's figures showed the second's data, and both had the same column label. Each folder's
    plots must be the ones its own render draws, and each column its own numbers."""
    a, b = tmp_path / "a" / "same", tmp_path / "b" / "same"
    for folder in (a, b):
        folder.mkdir(parents=True)
        for name in ("device.json", "bench_checkpointing.json"):
            shutil.copy(fixture_copy / name, folder)
    data = json.loads((b / "bench_checkpointing.json").read_text())
    for entry in data["benchmarks"]:  # b's own numbers: every peak twice a's
        for key in [k for k in entry if k.endswith("_bytes")]:
            entry[key] *= 2
    (b / "bench_checkpointing.json").write_text(json.dumps(data))
    for folder in (a, b):  # each alone: the plots of its own data
        assert main(["render", str(folder)]) == 0
    own = {folder: {p.name: p.read_bytes() for p in (folder / "plots").glob("checkpointing-*.png")}
           for folder in (a, b)}
    assert own[a] and own[a].keys() == own[b].keys()
    assert all(own[a][name] != own[b][name] for name in own[a])

    out = tmp_path / "compare"
    assert main(["render", str(a), str(b), "-o", str(out)]) == 0
    plot_dirs = sorted(p for p in (out / "plots").iterdir() if p.is_dir())
    assert [p.name for p in plot_dirs] == ["1-a-same", "2-b-same"]
    for folder, mine in zip((a, b), plot_dirs):
        assert {p.name: p.read_bytes() for p in mine.glob("checkpointing-*.png")} == own[folder]

    summary = (out / "summary.md").read_text()
    header, rows = section_tables(summary, "Activation checkpointing (bench_checkpointing)")[0]
    column = {folder: header.index(f"CPU (AMD EPYC) ({folder.parent.name}/same): peak allocated") for folder in (a, b)}
    peaks = {folder: [row[column[folder]] for row in rows] for folder in (a, b)}
    measured = cases(json.loads((a / "bench_checkpointing.json").read_text())["benchmarks"])
    assert peaks[a] == [fmt_bytes(e["peak_allocated_bytes"]) for e in measured]
    assert peaks[b] == [fmt_bytes(2 * e["peak_allocated_bytes"]) for e in measured]
