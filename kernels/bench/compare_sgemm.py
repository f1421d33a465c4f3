#!/usr/bin/env python3
"""kernels/bench/compare_sgemm.py: the CPU GEMM libraries side by side, at the products of one
training step, so that trainmem's CPU GEMM is chosen on measurement (issue 41; kernels/cpu/speed.md).

  python3 kernels/bench/compare_sgemm.py --lib openblas=/usr/lib/x86_64-linux-gnu/libopenblas.so.0 \\
      --lib 'openblas-haswell=/usr/lib/x86_64-linux-gnu/libopenblas.so.0:OPENBLAS_CORETYPE=Haswell' \\
      --lib blis=/path/to/libblis.so.4 --lib mkl=/path/to/libmkl_rt.so.3 \\
      --lib scipy-openblas=/path/to/libscipy_openblas.so:prefix=scipy_ --torch .venv-torch/bin/python

Each library is loaded alone in a process of its own (ctypes), with THREADS threads (its own
variable: OPENBLAS_NUM_THREADS, BLIS_NUM_THREADS, MKL_NUM_THREADS, OMP_NUM_THREADS), and runs
every product of the step as trainmem calls it (row-major cblas_sgemm, kernels/cpu/matmul.cpp):

  forward   out[N, OC]     = inp[N, C]  @ W[OC, C]^T      (NoTrans, Trans)
  dinp      dinp[N, C]     = dout[N, OC] @ W[OC, C]       (NoTrans, NoTrans)
  dweight   dW[OC, C]     += dout^T @ inp                  (Trans, NoTrans, beta 1)

for the linear layers of a GPT-2 block (qkv C->3C, proj C->C, fc C->4C, fc_proj 4C->C) and the
head (C->Vp), at N = B*T rows. Each product: 2 untimed calls, then the median of REPS timed ones.
Rounds interleave the libraries (a change of the machine's load falls on all of them); the table
gives each library's median over the rounds, per product and for the step (each block product
counted once per layer, the head once). --torch PYTHON also times torch.mm / torch.addmm on the
same shapes (PyTorch's own GEMM, at torch.set_num_threads(THREADS)).
Output: a table, and with --json FILE every round's figures.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

# (name, C, OC): the linear layers of a GPT-2 block and its head, from the model's C and Vp.
def products(C: int, Vp: int) -> list[tuple[str, int, int]]:
    return [("qkv", C, 3 * C), ("proj", C, C), ("fc", C, 4 * C), ("fc_proj", 4 * C, C), ("head", C, Vp)]


PASSES = ("forward", "dinp", "dweight")

# One library's products, in a process of its own: cblas_sgemm through ctypes, or torch.mm.
WORKER = r'''
import json, statistics, sys, time
spec = json.loads(sys.argv[1])
if spec["kind"] == "torch":
    import torch
    torch.set_num_threads(spec["threads"])
    g = torch.Generator().manual_seed(1)
    def buffers(N, C, OC):
        inp, W, dout = (torch.rand(s, generator=g) * 2 - 1 for s in ((N, C), (OC, C), (N, OC)))
        dW = torch.zeros(OC, C)
        return {"forward": lambda: torch.mm(inp, W.t()), "dinp": lambda: torch.mm(dout, W),
                "dweight": lambda: dW.addmm_(dout.t(), inp)}
else:
    import ctypes
    import numpy as np
    lib = ctypes.CDLL(spec["path"], mode=ctypes.RTLD_GLOBAL)
    sgemm = getattr(lib, spec["prefix"] + "cblas_sgemm")
    P = ctypes.POINTER(ctypes.c_float)
    sgemm.restype = None
    sgemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, P, ctypes.c_int, P, ctypes.c_int, ctypes.c_float, P, ctypes.c_int]
    ROW, NO, T = 101, 111, 112
    rng = np.random.default_rng(1)
    def buffers(N, C, OC):
        inp, W, dout = (rng.random(s, dtype=np.float32) * 2 - 1 for s in ((N, C), (OC, C), (N, OC)))
        o, dinp, dW = np.empty((N, OC), np.float32), np.empty((N, C), np.float32), np.zeros((OC, C), np.float32)
        p = lambda a: a.ctypes.data_as(P)
        return {"forward": lambda: sgemm(ROW, NO, T, N, OC, C, 1.0, p(inp), C, p(W), C, 0.0, p(o), OC),
                "dinp": lambda: sgemm(ROW, NO, NO, N, C, OC, 1.0, p(dout), OC, p(W), C, 0.0, p(dinp), C),
                "dweight": lambda: sgemm(ROW, T, NO, OC, C, N, 1.0, p(dout), OC, p(inp), C, 1.0, p(dW), C)}
out = {}
for name, N, C, OC in spec["shapes"]:
    for p, call in buffers(N, C, OC).items():
        for _ in range(2):
            call()
        times = []
        for _ in range(spec["reps"]):
            t0 = time.perf_counter(); call(); times.append(time.perf_counter() - t0)
        out[f"{name}/{p}"] = statistics.median(times)
print(json.dumps(out))
'''

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "BLIS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")


def parse_lib(text: str) -> dict:
    """NAME=PATH[:VAR=VALUE][:prefix=P]..."""
    name, _, rest = text.partition("=")
    path, *options = rest.split(":")
    lib = {"name": name, "path": path, "env": {}, "prefix": ""}
    for o in options:
        key, _, value = o.partition("=")
        if key == "prefix":
            lib["prefix"] = value
        else:
            lib["env"][key] = value
    if not name or not os.path.exists(path):
        raise SystemExit(f"compare_sgemm: --lib {text}: give NAME=PATH of an existing library")
    return lib


def run_one(lib: dict, shapes, a) -> dict:
    env = {**os.environ, **{v: str(a.threads) for v in THREAD_VARIABLES}, **lib["env"]}
    torch = lib["name"] == "torch"
    spec = {"kind": "torch" if torch else "cblas", "path": lib.get("path"), "prefix": lib.get("prefix", ""),
            "shapes": shapes, "reps": a.reps, "threads": a.threads}
    cmd = [a.torch if torch else a.python, "-c", WORKER, json.dumps(spec)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise SystemExit(f"compare_sgemm: {lib['name']}: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", action="append", default=[], help="NAME=PATH[:VAR=VALUE][:prefix=P]")
    p.add_argument("--torch", help="a python with PyTorch: time torch.mm too")
    p.add_argument("--python", default=sys.executable, help="the python with numpy that loads the libraries")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--rows", type=int, default=1024, help="N = B*T [1024: B=4, T=256]")
    p.add_argument("--dim", type=int, default=768, help="C [768: gpt2-124m]")
    p.add_argument("--vocab-padded", type=int, default=50304, help="Vp [50304: gpt2-124m's 50257 padded]")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--json")
    a = p.parse_args()
    libs = [parse_lib(t) for t in a.lib] + ([{"name": "torch", "env": {}}] if a.torch else [])
    shapes = [(name, a.rows, C, OC) for name, C, OC in products(a.dim, a.vocab_padded)]
    rounds = []
    for r in range(a.rounds):
        load = os.getloadavg()[0]
        rounds.append({"load_avg": load, "libs": {lib["name"]: run_one(lib, shapes, a) for lib in libs}})
        print(f"compare_sgemm: round {r + 1}/{a.rounds} done (load {load:.2f})", file=sys.stderr)
    keys = [f"{name}/{p}" for name, *_ in shapes for p in PASSES]
    median = {lib["name"]: {k: statistics.median(rd["libs"][lib["name"]][k] for rd in rounds) for k in keys}
              for lib in libs}
    flops = {f"{name}/{p}": 2.0 * N * C * OC for name, N, C, OC in shapes for p in PASSES}
    per_step = {k: (1 if k.startswith("head/") else a.layers) for k in keys}
    names = [lib["name"] for lib in libs]
    print(f"{'product (GFLOP/s)':<22}" + "".join(f"{n:>18}" for n in names))
    for k in keys:
        print(f"{k:<22}" + "".join(f"{flops[k] / median[n][k] / 1e9:>18.1f}" for n in names))
    step = {n: sum(median[n][k] * per_step[k] for k in keys) for n in names}
    print(f"{'step GEMMs (ms)':<22}" + "".join(f"{step[n] * 1e3:>18.1f}" for n in names))
    if a.json:
        with open(a.json + ".tmp", "w") as f:
            json.dump({"args": vars(a), "rounds": rounds, "median_seconds": median, "step_seconds": step}, f, indent=1)
        os.replace(a.json + ".tmp", a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
