#!/usr/bin/env python3
"""kernels/bench/memory_bandwidth.py: this machine's memory bandwidth, the limit of the step's
memory-bound kernels (AdamW, cross-entropy, the gradient norm, layernorm, GELU), beside which
kernels/cpu/speed.md puts each kernel's own rate.

  python3 kernels/bench/memory_bandwidth.py [--mib 256] [--processes 1 2]

Two patterns over arrays far larger than the caches, by 1 and by 2 processes at once (the cores
the CPU runs use): a copy (numpy.copyto: one stream read, one written, as AdamW's or an in-place
update's) and a read (float32 sum: one stream read, as the gradient norm's). Each process takes the
best of 7 passes; the figure is the bytes read plus written per second, summed over the processes.
Only numpy is needed.
"""
from __future__ import annotations

import argparse
import time
from multiprocessing import Pool

import numpy as np

PASSES = 7


def _rate(args: tuple[str, int]) -> float:
    """GB/s (read + written) of one process's best pass."""
    kind, nbytes = args
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(PASSES):
        start = time.perf_counter()
        if kind == "copy":
            np.copyto(dst, src)
        else:
            src.sum()
        best = min(best, time.perf_counter() - start)
    moved = 2 * nbytes if kind == "copy" else nbytes
    return moved / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256, help="array size in MiB (default 256)")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2], help="process counts (default 1 2)")
    a = parser.parse_args()
    if a.mib < 1 or any(p < 1 for p in a.processes):
        parser.error("--mib and --processes must be positive")
    for processes in a.processes:
        for kind in ("copy", "read"):
            with Pool(processes) as pool:
                rates = pool.map(_rate, [(kind, a.mib << 20)] * processes)
            print(f"{processes} process(es), {kind}: {sum(rates):.1f} GB/s read + written")


if __name__ == "__main__":
    main()
