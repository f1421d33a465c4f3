"""The section "trainmem beside PyTorch", from a committed comparison file (fixtures/peers/: a real
`compare_torch.py --model small --batch 4` run on the CPU CI machine; no torch is needed to render
it): its numbers equal the file's, a folder without such a file shows nothing of it, and a damaged
one is listed as missing."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import FIXTURE, REPO
from reports.trainmem_report.__main__ import main

PEER = REPO / "reports" / "tests" / "fixtures" / "peers" / "peer-torch-small-B4-fp32.json"
MiB = 2**20


@pytest.fixture
def folder(tmp_path):
    """A small results folder (the device and the baseline benchmark of the committed fixture): the
    section is the same in any folder, and this one renders in a second."""
    for name in ("device.json", "bench_baseline.json"):
        shutil.copy(FIXTURE / name, tmp_path)
    return tmp_path


def rows(summary: str, section: str) -> dict[str, list[str]]:
    """First cell -> the other cells, for every table row of one section of summary.md."""
    text = summary.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split(" | ")]
                                              for line in text.splitlines() if line.startswith("| "))}


def test_the_section_shows_both_sides_with_the_files_numbers(folder):
    shutil.copy(PEER, folder)
    assert main(["render", str(folder)]) == 0
    summary = (folder / "summary.md").read_text()
    c = json.loads(PEER.read_text())
    table = rows(summary, "trainmem beside PyTorch: small-B4-fp32")
    tm, pt = c["trainmem"], c["pytorch"]
    assert table["peak allocated"] == [f"{tm['peak_allocated_bytes'] / MiB:.2f} MiB",
                                       f"{pt['peak_allocated_bytes'] / MiB:.2f} MiB",
                                       f"{tm['peak_allocated_bytes'] / pt['peak_allocated_bytes']:.3f}"]
    for category in ("parameters", "gradients", "optimizer_state", "activations"):
        assert table[f"{category} (peak)"][:2] == [f"{tm['by_category'][category] / MiB:.2f} MiB",
                                                   f"{pt['by_category'][category] / MiB:.2f} MiB"]
    assert table["step time (median)"][2] == f"{tm['step_ms_median'] / pt['step_ms_median']:.3f}"
    for region in c["saved_activations"]["by_region"]:
        assert table[region["region"]] == [f"{region['trainmem_bytes']:,} B", f"{region['pytorch_bytes']:,} B",
                                           f"{region['pytorch_extra_bytes']:,} B", "yes"]
    layers = c["config"]["model"]["layers"]
    assert f"{layers} x causal mask (masked_fill)" in summary
    assert "peer-torch" not in summary.split("## Missing from these results", 1)[1]
    assert "trainmem beside PyTorch" in (folder / "index.html").read_text()


def test_without_a_comparison_file_the_report_says_nothing_of_it(folder):
    assert main(["render", str(folder)]) == 0
    summary = (folder / "summary.md").read_text()
    assert "beside PyTorch" not in summary and "peer-torch" not in summary


def test_a_damaged_comparison_file_is_listed_and_the_rest_is_drawn(folder):
    (folder / "peer-torch-other.json").write_text(json.dumps({"kind": "something else"}))
    broken = json.loads(PEER.read_text())
    del broken["pytorch"]["by_category"]
    (folder / "peer-torch-broken.json").write_text(json.dumps(broken))
    assert main(["render", str(folder)]) == 0
    missing = (folder / "summary.md").read_text().split("## Missing from these results", 1)[1]
    assert "peer-torch-other.json: not a reports/peers/compare_torch.py result" in missing
    assert "peer-torch-broken.json: could not be drawn (KeyError" in missing
    assert "## Baseline training step (bench_baseline)" in (folder / "summary.md").read_text()
