"""PyTorch's scaled_dot_product_attention beside trainmem's attention kernels: bench_flash_attention's
shapes, timed the way it times trainmem's (one untimed warm-up call, then each call timed on the
device: CUDA events on a GPU), named the way it names them, in a file shaped like Google
Benchmark's JSON, so the report reads both alike.

  python3 -m reports.peers.torch_attention --device cuda --seq 2048 8192 --head-dim 128 --json sdpa.json
  python3 -m reports.peers.torch_attention --device cpu --tokens 256 --channels 64 --seq 64 --head-dim 16 \\
      --backends math

Names: attention/torch_sdpa_<backend>_<dtype>/<fwd|fwd_bwd>/T:<T>/D:<D>/causal:<0|1>, e.g.
attention/torch_sdpa_flash_bf16/fwd_bwd/T:8192/D:128/causal:1 beside trainmem's
attention/flash_v3_bf16/fwd_bwd/T:8192/D:128/causal:1 (suites/flash_attention/attention_bench_cases.h).
Shapes as there: B*T = --tokens (16384) and H*D = --channels (2048), so B = tokens/T, H = channels/D.
FLOPs as FlashAttention counts them (and attention_bench_cases.h): forward 4 B H T^2 D, halved when
causal; forward+backward 3.5 times the forward. A back-end that refuses a shape gives that case
"error_occurred" and PyTorch's words, never a missing row.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ModuleNotFoundError:
    print("torch_attention: error: PyTorch is not installed for this Python: run ci/setup-torch, then "
          ".venv-torch/bin/python -m reports.peers.torch_attention ...", file=sys.stderr)
    sys.exit(2)

from ..trainmem_report.output_file import write_file

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
PASSES = ("fwd", "fwd_bwd")


def forward_flops(B: int, H: int, T: int, D: int, causal: bool) -> float:
    f = 4.0 * B * H * T * T * D
    return f / 2 if causal else f


def flops(B: int, H: int, T: int, D: int, causal: bool, pass_: str) -> float:
    return forward_flops(B, H, T, D, causal) * (1.0 if pass_ == "fwd" else 3.5)


def name(backend: str, dtype: str, pass_: str, T: int, D: int, causal: bool) -> str:
    return f"attention/torch_sdpa_{backend}_{dtype}/{pass_}/T:{T}/D:{D}/causal:{int(causal)}"


class Timer:
    """Seconds of device work between start() and stop(): CUDA events on a GPU, the wall clock on the CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.begin, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def start(self):
        if self.cuda:
            self.begin.record()
        else:
            self.t0 = time.perf_counter()

    def stop(self) -> float:
        if self.cuda:
            self.end.record()
            self.end.synchronize()
            return self.begin.elapsed_time(self.end) / 1e3
        return time.perf_counter() - self.t0


def measure(call, device: torch.device, min_seconds: float, max_calls: int = 200) -> list[float]:
    """One untimed call, then timed calls until min_seconds of them (at least 3)."""
    call()
    if device.type == "cuda":
        torch.cuda.synchronize()
    timer, times = Timer(device), []
    while len(times) < 3 or (sum(times) < min_seconds and len(times) < max_calls):
        timer.start()
        call()
        times.append(timer.stop())
    return times


def one_case(backend: str, dtype: str, pass_: str, T: int, D: int, causal: bool, a, device) -> dict:
    B, H = a.tokens // T, a.channels // D
    case = {"name": name(backend, dtype, pass_, T, D, causal), "run_type": "iteration", "time_unit": "ms",
            "B": B, "T": T, "D": D, "causal": int(causal), "H": H}
    case["run_name"] = case["name"]
    generator = torch.Generator(device=device).manual_seed(1)
    shape = (B, H, T, D)
    q, k, v, dout = (torch.rand(shape, generator=generator, device=device, dtype=DTYPES[dtype]) * 2 - 1
                     for _ in range(4))
    if pass_ == "fwd_bwd":
        for t in (q, k, v):
            t.requires_grad_(True)

    def call():
        with sdpa_kernel([BACKENDS[backend]]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            if pass_ == "fwd_bwd":
                out.backward(dout)

    try:
        times = measure(call, device, a.min_time)
    except RuntimeError as e:  # the back-end cannot run this shape, dtype or device here
        case.update({"error_occurred": True, "error_message": str(e).splitlines()[0][:300]})
        return case
    seconds = statistics.median(times)
    work = flops(B, H, T, D, causal, pass_) / 1e12
    case.update({"iterations": len(times), "real_time": seconds * 1e3, "cpu_time": seconds * 1e3,
                 "TFLOP/s": work / seconds, "TFLOP_per_iteration": work})
    return case


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m reports.peers.torch_attention", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--dtype", choices=tuple(DTYPES), nargs="+", default=["bf16"])
    p.add_argument("--backends", choices=tuple(BACKENDS), nargs="+", default=["flash", "cudnn"])
    p.add_argument("--seq", type=int, nargs="+", default=[2048, 8192], help="T values [2048 8192]")
    p.add_argument("--head-dim", type=int, nargs="+", default=[128], help="D values [128]")
    p.add_argument("--causal", choices=("0", "1"), nargs="+", default=["0", "1"])
    p.add_argument("--pass", dest="passes", choices=PASSES, nargs="+", default=list(PASSES))
    p.add_argument("--tokens", type=int, default=16384, help="B*T [16384]")
    p.add_argument("--channels", type=int, default=2048, help="H*D [2048]")
    p.add_argument("--min-time", type=float, default=0.1, help="seconds of timed calls per case [0.1]")
    p.add_argument("--json", type=pathlib.Path, help="write the result here (whole or not at all)")
    a = p.parse_args(argv)
    for T in a.seq:
        if T < 1 or a.tokens % T:
            p.error(f"--seq {T}: must divide --tokens {a.tokens} (B = tokens / T)")
    for D in a.head_dim:
        if D < 1 or a.channels % D:
            p.error(f"--head-dim {D}: must divide --channels {a.channels} (H = channels / D)")
    if a.min_time <= 0:
        p.error("--min-time must be > 0")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: this PyTorch sees no GPU")
    if a.json is not None and not a.json.parent.is_dir():
        p.error(f"--json {a.json}: the folder {a.json.parent} does not exist")
    return a


def run(a: argparse.Namespace) -> dict:
    device = torch.device(a.device)
    context = {"framework": "pytorch", "torch_version": torch.__version__, "device_kind": device.type,
               "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
               "cudnn_version": torch.backends.cudnn.version() if device.type == "cuda" else None}
    cases = [one_case(b, dt, ps, T, D, c == "1", a, device)
             for ps in a.passes for D in a.head_dim for c in a.causal for T in a.seq
             for dt in a.dtype for b in a.backends]
    return {"context": context, "benchmarks": cases}


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    result = run(a)
    text = json.dumps(result, indent=1) + "\n"
    if a.json is None:
        sys.stdout.write(text)
    else:
        write_file(a.json, lambda p: p.write_text(text))
    for c in result["benchmarks"]:
        figure = f"error: {c['error_message']}" if c.get("error_occurred") else \
            f"{c['real_time']:.3f} ms, {c['TFLOP/s']:.1f} TFLOP/s"
        print(f"torch_attention: {c['name']}: {figure}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
