"""The section "CPU step time beside PyTorch", from committed speed_torch.py results (fixtures/peers/:
real `speed_torch.py` runs on the CPU CI machine, two kernel families each; no torch is needed to
render them): a row per shape and family with the file's figures, the ratio as the median of the
rounds' with their range, the goal's verdict as the file gives it; a folder without such files
shows nothing of it; a damaged one is listed as missing and the rest is drawn."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import FIXTURE, REPO, section_tables
from reports.trainmem_report.__main__ import main

PEERS = REPO / "reports" / "tests" / "fixtures" / "peers"
SPEED_FILES = sorted(PEERS.glob("peer-speed-*.json"))
SECTION = "CPU step time beside PyTorch"


@pytest.fixture
def folder(tmp_path):
    for name in ("device.json", "bench_baseline.json"):
        shutil.copy(FIXTURE / name, tmp_path)
    return tmp_path


def test_there_are_committed_runs_of_both_kernel_families():
    assert SPEED_FILES, "fixtures/peers/peer-speed-*.json: none committed"
    for path in SPEED_FILES:
        c = json.loads(path.read_text())
        assert len(c["families"]) == 2 and c["config"]["rounds"] >= 5, path.name


def test_every_shape_and_family_is_a_row_with_the_files_figures(folder):
    for path in SPEED_FILES:
        shutil.copy(path, folder)
    assert main(["render", str(folder)]) == 0
    summary = (folder / "summary.md").read_text()
    (header, rows), = section_tables(summary, SECTION)
    assert header[:2] == ["model", "kernel family"]
    expected = []
    for path in SPEED_FILES:
        c = json.loads(path.read_text())
        for f in c["families"]:
            r = f["ratio_per_round"]
            expected.append([f["name"], f"{f['trainmem']['step_ms_median']:.1f} ms",
                             f"{f['pytorch']['step_ms_median']:.1f} ms",
                             f"{f['ratio']:.3f} ({min(r):.3f}-{max(r):.3f}, {len(r)} rounds)",
                             f"{'yes' if f['met'] else 'no'} (at most {f['at_most']})"])
            # the verdict is the file's, and follows from its own ratio
            assert f["met"] == (f["ratio"] <= f["at_most"])
    assert [[row[1], *row[4:]] for row in rows] == expected
    assert "Commands: \\`trainmem train" in summary  # summary.md escapes the backquote


def test_without_a_speed_file_the_report_says_nothing_of_it(folder):
    assert main(["render", str(folder)]) == 0
    summary = (folder / "summary.md").read_text()
    assert SECTION not in summary and "peer-speed" not in summary


def test_a_damaged_speed_file_is_listed_and_the_rest_is_drawn(folder):
    (folder / "peer-speed-other.json").write_text(json.dumps({"kind": "something else"}))
    broken = json.loads(SPEED_FILES[0].read_text())
    del broken["families"][0]["pytorch"]
    (folder / "peer-speed-broken.json").write_text(json.dumps(broken))
    assert main(["render", str(folder)]) == 0
    summary = (folder / "summary.md").read_text()
    missing = summary.split("## Missing from these results", 1)[1]
    assert "peer-speed-other.json: not a reports/peers/speed_torch.py result" in missing
    assert "peer-speed files: could not be drawn (KeyError" in missing
    assert "## Baseline training step (bench_baseline)" in summary
