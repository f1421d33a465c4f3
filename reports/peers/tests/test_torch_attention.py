"""torch_attention.py on the CPU at small shapes: its names are bench_flash_attention's, its FLOP
count is attention_bench_cases.h's, its rate is that count over its time, and a back-end that
cannot run a case says so in that case instead of dropping it."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed for this Python (ci/setup-torch installs it)")

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
from reports.peers.torch_attention import flops, name  # noqa: E402


def test_flops_are_flashattentions_count():
    # forward 4 B H T^2 D, halved when causal; forward+backward 3.5 times the forward
    assert flops(2, 3, 64, 16, False, "fwd") == 4 * 2 * 3 * 64 * 64 * 16
    assert flops(2, 3, 64, 16, True, "fwd") == 2 * 2 * 3 * 64 * 64 * 16
    assert flops(2, 3, 64, 16, True, "fwd_bwd") == 3.5 * 2 * 2 * 3 * 64 * 64 * 16
    assert name("flash", "bf16", "fwd_bwd", 8192, 128, True) == "attention/torch_sdpa_flash_bf16/fwd_bwd/T:8192/D:128/causal:1"


def test_a_cpu_run_writes_every_case(tmp_path):
    out = tmp_path / "sdpa.json"
    run = subprocess.run([sys.executable, "-m", "reports.peers.torch_attention", "--device", "cpu", "--dtype", "fp32",
                          "--backends", "math", "cudnn", "--tokens", "128", "--channels", "32", "--seq", "32", "64",
                          "--head-dim", "16", "--min-time", "0.001", "--json", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    cases = {c["name"]: c for c in json.loads(out.read_text())["benchmarks"]}
    # 2 passes x 2 causal x 2 T x 2 back-ends
    assert len(cases) == 16
    math = cases["attention/torch_sdpa_math_fp32/fwd/T:64/D:16/causal:1"]
    assert (math["B"], math["T"], math["D"], math["causal"]) == (2, 64, 16, 1)
    assert math["TFLOP/s"] == pytest.approx(math["TFLOP_per_iteration"] / (math["real_time"] / 1e3))
    assert math["TFLOP_per_iteration"] == pytest.approx(flops(2, 2, 64, 16, True, "fwd") / 1e12)
    # cuDNN's back-end has no CPU kernel: the case is there, with PyTorch's reason
    cudnn = cases["attention/torch_sdpa_cudnn_fp32/fwd/T:64/D:16/causal:1"]
    assert cudnn["error_occurred"] and cudnn["error_message"]


def test_a_shape_that_does_not_divide_is_refused():
    run = subprocess.run([sys.executable, "-m", "reports.peers.torch_attention", "--device", "cpu", "--tokens", "100",
                          "--seq", "64"], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 2 and "must divide --tokens 100" in run.stderr
