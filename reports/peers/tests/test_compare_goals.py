"""compare_torch's goals from hand-made pairings (no torch, no trainmem needed: these run in ci/test):
one goal per measure and pairing, its ratio trainmem / PyTorch, met exactly when the ratio is at
most 1.00, and each pairing named with the PyTorch setting it is measured against."""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3]))  # `reports.peers`, as from the root
from reports.peers.compare_torch import PAIRINGS, goals  # noqa: E402


def sides(tm_peak: int, pt_peak: int, tm_ms: float, pt_ms: float) -> dict:
    return {"trainmem": {"peak_allocated_bytes": tm_peak, "step_ms_median": tm_ms},
            "pytorch": {"peak_allocated_bytes": pt_peak, "step_ms_median": pt_ms}}


def test_each_goal_is_its_ratio_against_one_point_zero():
    pairings = {"persistent": sides(100, 100, 60.0, 50.0),   # equal peaks: met; slower: not met
                "on-demand": sides(101, 100, 40.0, 50.0)}    # a byte more: not met; faster: met
    found = {(g["pairing"], g["measure"]): g for g in goals(pairings, "cpu")}
    assert len(found) == 4
    expected = {("persistent", "peak_allocated_bytes"): (1.0, True), ("persistent", "step_ms_median"): (1.2, False),
                ("on-demand", "peak_allocated_bytes"): (1.01, False), ("on-demand", "step_ms_median"): (0.8, True)}
    for key, (ratio, met) in expected.items():
        assert found[key]["ratio"] == pytest.approx(ratio) and found[key]["met"] is met, found[key]
        assert (found[key]["trainmem"], found[key]["pytorch"]) == \
            (pairings[key[0]]["trainmem"][key[1]], pairings[key[0]]["pytorch"][key[1]])


def test_the_goals_name_the_pairing_and_the_device():
    on_cpu = goals({"persistent": sides(1, 1, 1, 1)}, "cpu")
    assert [g["goal"] for g in on_cpu] == [
        "peak allocated <= 1.00x PyTorch's: --grads persistent vs set_to_none=False",
        "CPU step time <= 1.00x PyTorch's: --grads persistent vs set_to_none=False"]
    on_gpu = goals({"on-demand": sides(1, 1, 1, 1)}, "cuda")
    assert on_gpu[1]["goal"] == "step time <= 1.00x PyTorch's: --grads on-demand vs set_to_none=True"


def test_the_pairings_are_the_same_gradient_lifetimes():
    """trainmem's persistent gradients are PyTorch's kept ones; on demand, PyTorch's set_to_none."""
    assert PAIRINGS == {"persistent": False, "on-demand": True}
