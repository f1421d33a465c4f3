"""The section "trainmem beside PyTorch", from a committed comparison file (fixtures/peers/: a real
`compare_torch.py --model small --batch 4` run on the CPU CI machine, both pairings; no torch is
needed to render it): the goals table, each pairing's table and the saved activations show the
file's numbers; a folder without such a file shows nothing of it; a damaged one, or one written by
an earlier compare_torch.py, is listed as missing."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import FIXTURE, REPO, section_tables
from reports.trainmem_report.__main__ import main

PEER = REPO / "reports" / "tests" / "fixtures" / "peers" / "peer-torch-small-B4-fp32.json"
SECTION = "trainmem beside PyTorch: small-B4-fp32"
MiB = 2**20


@pytest.fixture
def folder(tmp_path):
    """A small results folder (the device and the baseline benchmark of the committed fixture): the
    section is the same in any folder, and this one renders in a second."""
    for name in ("device.json", "bench_baseline.json"):
        shutil.copy(FIXTURE / name, tmp_path)
    return tmp_path


def tables(summary: str) -> list[dict[str, list[str]]]:
    """The section's tables, each as first cell -> the other cells."""
    return [{row[0]: row[1:] for row in rows} for _, rows in section_tables(summary, SECTION)]


def mib(b: float) -> str:
    return f"{b / MiB:.2f} MiB"


@pytest.fixture
def rendered(folder) -> tuple[dict, list[dict[str, list[str]]], str]:
    shutil.copy(PEER, folder)
    assert main(["render", str(folder)]) == 0
    summary = (folder / "summary.md").read_text()
    return json.loads(PEER.read_text()), tables(summary), summary


def test_the_goals_table_shows_every_goal_with_its_figures_ratio_and_verdict(rendered):
    c, (goals, *_), _ = rendered
    assert len(c["goals"]) == 4 and len(goals) == 4  # peak allocated and step time, for both pairings
    for g in c["goals"]:
        pairing = c["pairings"][g["pairing"]]
        # the goal's figures are the pairing's, its verdict follows from their ratio
        assert (g["trainmem"], g["pytorch"]) == (pairing["trainmem"][g["measure"]], pairing["pytorch"][g["measure"]])
        ratio = g["trainmem"] / g["pytorch"]
        assert g["met"] == (ratio <= 1.0)
        shown = mib if g["measure"] == "peak_allocated_bytes" else (lambda ms: f"{ms:.1f} ms")
        assert goals[g["goal"]] == [shown(g["trainmem"]), shown(g["pytorch"]), f"{ratio:.3f}",
                                    "yes" if g["met"] else "no"]
    memory = [g for g in c["goals"] if g["measure"] == "peak_allocated_bytes"]
    assert {g["pairing"] for g in memory} == {"persistent", "on-demand"}


def test_each_pairing_shows_both_sides_and_what_a_step_leaves(rendered):
    c, (_, persistent, on_demand, _), summary = rendered
    for table, name, set_to_none in ((persistent, "persistent", False), (on_demand, "on-demand", True)):
        tm, pt = c["pairings"][name]["trainmem"], c["pairings"][name]["pytorch"]
        assert (tm["grads"], pt["set_to_none"]) == (name, set_to_none)  # as each program states it
        assert f"trainmem --grads {name} beside PyTorch zero_grad(set_to_none={set_to_none})" in summary
        assert table["peak allocated"] == [mib(tm["peak_allocated_bytes"]), mib(pt["peak_allocated_bytes"]),
                                           f"{tm['peak_allocated_bytes'] / pt['peak_allocated_bytes']:.3f}"]
        for category in ("parameters", "gradients", "optimizer_state", "activations"):
            assert table[f"{category} (peak)"][:2] == [mib(tm["by_category"][category]), mib(pt["by_category"][category])]
        held = [mib(side["held_between_steps"]["gradients_bytes"]) for side in (tm, pt)]
        assert table["gradients held between steps"][:2] == held
        assert table["step time (median)"][2] == f"{tm['step_ms_median'] / pt['step_ms_median']:.3f}"
    # set_to_none=False keeps every gradient between steps on both sides; on demand, none
    assert persistent["gradients held between steps"][:2] == persistent["gradients (peak)"][:2]
    assert on_demand["gradients held between steps"] == ["0.00 MiB", "0.00 MiB", "-"]


def test_the_saved_activations_are_shown_once(rendered):
    c, tables_, summary = rendered
    saved = tables_[-1]
    for region in c["saved_activations"]["by_region"]:
        assert saved[region["region"]] == [f"{region['trainmem_bytes']:,} B", f"{region['pytorch_bytes']:,} B",
                                           f"{region['pytorch_extra_bytes']:,} B", "yes"]
    assert saved["all"][:2] == [f"{c['saved_activations']['trainmem']['bytes']:,} B",
                                f"{c['saved_activations']['pytorch']['bytes']:,} B"]
    assert f"{c['config']['model']['layers']} x causal mask (masked_fill)" in summary
    assert "peer-torch" not in summary.split("## Missing from these results", 1)[1]


def test_the_machine_load_of_every_round_is_shown(rendered):
    c, _, summary = rendered
    rounds = [load[0] for load in c["machine"]["load_avg_per_round"]]
    assert len(rounds) == c["config"]["rounds"]
    assert f"{min(rounds):.1f} to {max(rounds):.1f} at the start of the rounds" in summary


def test_without_a_comparison_file_the_report_says_nothing_of_it(folder):
    assert main(["render", str(folder)]) == 0
    summary = (folder / "summary.md").read_text()
    assert "beside PyTorch" not in summary and "peer-torch" not in summary


def test_a_damaged_or_earlier_comparison_file_is_listed_and_the_rest_is_drawn(folder):
    (folder / "peer-torch-other.json").write_text(json.dumps({"kind": "something else"}))
    broken = json.loads(PEER.read_text())
    del broken["pairings"]["on-demand"]["pytorch"]["by_category"]
    (folder / "peer-torch-broken.json").write_text(json.dumps(broken))
    earlier = json.loads(PEER.read_text())
    del earlier["pairings"], earlier["goals"]  # one pairing at the top, as compare_torch.py wrote before
    (folder / "peer-torch-earlier.json").write_text(json.dumps(earlier))
    assert main(["render", str(folder)]) == 0
    missing = (folder / "summary.md").read_text().split("## Missing from these results", 1)[1]
    assert "peer-torch-other.json: not a reports/peers/compare_torch.py result" in missing
    assert "peer-torch-broken.json: could not be drawn (KeyError" in missing
    assert "peer-torch-earlier.json: written by an earlier compare_torch.py" in missing
    assert "## Baseline training step (bench_baseline)" in (folder / "summary.md").read_text()


def test_the_peer_page_names_the_model_family_and_a_llamas_own_sizes():
    from reports.trainmem_report.peers import model_shape
    gpt = {"name": "tiny", "arch": "gpt", "layers": 2, "heads": 4, "dim": 64, "seq": 64, "vocab": 256}
    assert model_shape(gpt) == "gpt: L=2 H=4 C=64 T=64 V=256"
    llama = dict(gpt, arch="llama", kv_heads=2, ffn_dim=176)
    assert model_shape(llama) == "llama: L=2 H=4 Hkv=2 C=64 F=176 T=64 V=256"
