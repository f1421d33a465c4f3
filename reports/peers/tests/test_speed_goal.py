"""speed_torch's verdicts from hand-made runs (no torch, no trainmem needed: these run in ci/test):
a family's figure is the median of its rounds' ratios (not the ratio of the medians), each run's
figure the median of its steps after the warm-up, the goal met exactly when that ratio is at most
0.8; and --family is parsed into a name and the environment both programs get."""
from __future__ import annotations

import argparse
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3]))  # `reports.peers`, as from the root
from reports.peers.speed_torch import GOAL_RATIO, family_result, parse_family  # noqa: E402


def trainmem_run(ms: list[float]) -> dict:
    return {"steps": [{"ms": x} for x in ms], "device": {"cpu_gemm": "oneMKL 2026.0.2, sequential",
                                                         "cpu_gemm_kernels": "AVX2"}}


def pytorch_run(median_ms: float) -> dict:
    return {"step_ms_median": median_ms, "framework": {"version": "2.15.0"}}


def test_the_figure_is_the_median_of_the_rounds_ratios_after_the_warmup():
    # Warm-up steps (the first 2) are slow and must not count; round medians 40, 80, 45.
    tm = [trainmem_run([900, 900, 40, 39, 41]), trainmem_run([900, 900, 80, 80, 80]),
          trainmem_run([900, 900, 45, 45, 44])]
    pt = [pytorch_run(50.0), pytorch_run(200.0), pytorch_run(50.0)]
    f = family_result("own", {}, tm, pt, warmup=2)
    assert f["trainmem"]["step_ms_per_round"] == [40, 80, 45]
    assert f["ratio_per_round"] == pytest.approx([0.8, 0.4, 0.9])
    assert f["ratio"] == pytest.approx(0.8)  # the ratio of the medians would be 45 / 50 = 0.9
    assert f["met"] is True and f["at_most"] == GOAL_RATIO == 0.8
    assert f["trainmem"]["gemm"] == "oneMKL 2026.0.2, sequential" and f["pytorch"]["version"] == "2.15.0"


def test_a_ratio_above_the_goal_is_not_met():
    f = family_result("avx2", {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}, [trainmem_run([1, 81])], [pytorch_run(100.0)], 1)
    assert f["ratio"] == pytest.approx(0.81) and f["met"] is False
    assert f["env"] == {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def test_a_family_is_a_name_and_the_variables_both_programs_get():
    assert parse_family("own") == ("own", {})
    assert parse_family("avx2:MKL_ENABLE_INSTRUCTIONS=AVX2") == ("avx2", {"MKL_ENABLE_INSTRUCTIONS": "AVX2"})
    assert parse_family("h:OPENBLAS_CORETYPE=Haswell,MKL_CBWR=AVX2") == \
        ("h", {"OPENBLAS_CORETYPE": "Haswell", "MKL_CBWR": "AVX2"})
    for bad in (":A=1", "x:A", "x:=1", "x:A B=1"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_family(bad)
