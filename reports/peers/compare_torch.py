"""trainmem beside PyTorch: the same GPT, the same tokens, the same optimizer, one file with both.

  .venv-torch/bin/python -m reports.peers.compare_torch --model small --batch 4 --out reports/out/DIR
  .venv-torch/bin/python -m reports.peers.compare_torch --model gpt2-124m --layers 2 --seq 256 --batch 4

1. `trainmem tokens` writes the tokens (--data synthetic: train's own generator and seed; or any
   file) as a .tok file in the output folder; both trainers read that file.
2. One `trainmem train --record-memory` run, not timed, gives trainmem's saved activations.
3. --rounds rounds of `trainmem train --json` then `torch_train.py` (interleaved, so that a change of
   the machine's load falls on both); each reports the median of its steps after --warmup, and the
   file keeps every round and their median. Memory figures do not change between rounds (trainmem's
   are exact; PyTorch's are checked to be the same).
4. peer-torch-<label>.json: both sides' peak allocated, bytes by category, saved activations by
   part of the model (with PyTorch's extras named), step time, and trainmem / PyTorch ratios.
   `python3 -m reports.trainmem_report render DIR` shows it as "trainmem beside PyTorch".

Both use --threads threads (torch.set_num_threads; OPENBLAS_NUM_THREADS for trainmem's BLAS).
PyTorch runs with OMP_WAIT_POLICY=PASSIVE unless --omp-wait-policy says otherwise: its OpenMP threads
otherwise spin at every barrier, and on a machine shared with other work (more runnable threads than
cores) a step of `small` took 4580 ms instead of 55 ms on the 2-core CI machine (load average 8).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

from ..trainmem_report.output_file import write_file
from . import trainmem_saved
from .trainmem_program import REPO, SHAPE_FLAGS, TrainmemError, find_trainmem, run_trainmem, write_tokens

CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "workspace", "data", "other")


def pytorch_extra(t: dict) -> str | None:
    """Why a tensor PyTorch saves has no counterpart in trainmem, or None if it has one: the causal
    mask (trainmem's attention kernel tests j > i instead), the positions 0..T-1 (trainmem's
    embedding kernel counts them), and nll_loss's total weight (trainmem sums the loss on the host)."""
    if t["dtype"] == "bool":
        return "causal mask (masked_fill)"
    if t["dtype"] == "int64":
        return "positions (arange, wpe's indices)"
    if t["shape"] == []:
        return "a scalar (cross_entropy's total weight)"
    return None


def saved_comparison(trainmem_tensors: list[dict], torch_saved: dict) -> dict:
    """Per region: trainmem's bytes, PyTorch's, PyTorch's extras, and whether the rest is equal."""
    tm = trainmem_saved.bytes_by_region(trainmem_tensors)
    pt = torch_saved["by_region"]
    extras = [dict(t, why=pytorch_extra(t)) for t in torch_saved["tensors"] if pytorch_extra(t)]
    rows = []
    for region in dict.fromkeys(list(tm) + list(pt)):
        extra = sum(t["bytes"] for t in extras if t["region"] == region)
        rows.append({"region": region, "trainmem_bytes": tm.get(region, 0), "pytorch_bytes": pt.get(region, 0),
                     "pytorch_extra_bytes": extra, "equal": tm.get(region, 0) == pt.get(region, 0) - extra})
    return {"by_region": rows, "pytorch_extras": extras, "equal": all(r["equal"] for r in rows)}


def median_after(steps: list[dict], warmup: int) -> float:
    return statistics.median(s["ms"] for s in steps[warmup:])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m reports.peers.compare_torch", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="small")
    for flag in SHAPE_FLAGS:
        p.add_argument(f"--{flag}", type=int)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--keep-grads", action="store_true", help="PyTorch: zero_grad(set_to_none=False)")
    p.add_argument("--data", default="synthetic", help="synthetic or any file, through `trainmem tokens`")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--omp-wait-policy", choices=("PASSIVE", "ACTIVE", "inherit"), default="PASSIVE",
                   help="OMP_WAIT_POLICY for PyTorch (inherit: as this shell has it) [PASSIVE]")
    p.add_argument("--out", type=pathlib.Path, default=REPO / "reports" / "out" / "peers")
    p.add_argument("--label", help="the file is peer-torch-LABEL.json [model-B<batch>-<precision>]")
    p.add_argument("--trainmem", help="the trainmem program (default: the build folder's)")
    p.add_argument("--python", default=sys.executable, help="the Python with torch [this one]")
    a = p.parse_args(argv)
    for name in ("batch", "rounds", "steps", "threads"):
        if getattr(a, name) < 1:
            p.error(f"--{name}: must be at least 1, not {getattr(a, name)}")
    if a.warmup < 1:
        p.error("--warmup: must be at least 1 (trainmem's first step allocates Adam's moments)")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    load_before = os.getloadavg()
    try:
        trainmem = find_trainmem(a.trainmem)
    except TrainmemError as e:
        print(f"compare_torch: error: {e}", file=sys.stderr)
        return 2
    if subprocess.run([a.python, "-c", "import torch"], capture_output=True).returncode != 0:
        print(f"compare_torch: error: PyTorch is not installed for {a.python}: run ci/setup-torch, then "
              ".venv-torch/bin/python -m reports.peers.compare_torch ... (or give --python)", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    shape = [f for flag in SHAPE_FLAGS if getattr(a, flag) is not None for f in (f"--{flag}", str(getattr(a, flag)))]
    label = a.label or f"{a.model}{''.join(shape).replace('--', '-')}-B{a.batch}-{a.precision}" + \
        ("-keep-grads" if a.keep_grads else "")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": str(a.threads)}
    if a.omp_wait_policy != "inherit":
        env["OMP_WAIT_POLICY"] = a.omp_wait_policy
    try:
        tokens = write_tokens(trainmem, a.data, a.out / f"peer-torch-{label}.tok", a.seed)
        common = ["--model", a.model, *shape, "--batch", str(a.batch), "--data", str(tokens)]
        tm_base = [str(trainmem), "train", *common, "--precision", a.precision, "--seed", str(a.seed),
                   "--device", "cpu"]
        tm_cmd = tm_base + ["--steps", str(a.warmup + a.steps)]
        pt_cmd = [a.python, "-m", "reports.peers.torch_train", *common, "--precision", a.precision,
                  "--warmup", str(a.warmup), "--steps", str(a.steps), "--threads", str(a.threads),
                  "--seed", str(a.seed), "--trainmem", str(trainmem)] + (["--keep-grads"] if a.keep_grads else [])
        with tempfile.TemporaryDirectory(dir=a.out, prefix=".peer-torch-") as tmp:
            tmp = pathlib.Path(tmp)
            print(f"compare_torch: {label}: trainmem --record-memory (saved activations)", file=sys.stderr)
            run(tm_base + ["--steps", "1", "--record-memory", str(tmp / "trace.json")], env)
            tm_saved = trainmem_saved.saved_activations(json.loads((tmp / "trace.json").read_text()))
            tm_runs, pt_runs = [], []
            for r in range(a.rounds):
                print(f"compare_torch: {label}: round {r + 1}/{a.rounds}", file=sys.stderr)
                run(tm_cmd + ["--json", str(tmp / "tm.json")], env)
                tm_runs.append(json.loads((tmp / "tm.json").read_text()))
                run(pt_cmd + ["--json", str(tmp / "pt.json")], env)
                pt_runs.append(json.loads((tmp / "pt.json").read_text()))
    except (TrainmemError, RunFailed, ValueError, OSError) as e:
        print(f"compare_torch: error: {e}", file=sys.stderr)
        return 1
    result = combine(a, label, tm_cmd, pt_cmd, tm_saved, tm_runs, pt_runs)
    # Other work on the machine slows both sides (times only; memory figures do not depend on it).
    result["machine"] = {"cpu_cores": os.cpu_count(), "load_avg_before": list(load_before),
                         "load_avg_after": list(os.getloadavg())}
    path = a.out / f"peer-torch-{label}.json"
    write_file(path, lambda p: p.write_text(json.dumps(result, indent=2) + "\n"))
    r = result["ratios"]
    print(f"compare_torch: {path}: trainmem / PyTorch: peak allocated {r['peak_allocated']:.3f}, "
          f"step time {r['step_time']:.2f}; saved activations equal but for PyTorch's extras: "
          f"{result['saved_activations']['equal']}", file=sys.stderr)
    return 0


class RunFailed(RuntimeError):
    pass


def run(cmd: list[str], env: dict) -> None:
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RunFailed(f"{' '.join(cmd)}: exit {done.returncode}: " + " / ".join(tail))


def shown(arg: str) -> str:
    """A path inside the repository as a relative one (the commands are shown in the report)."""
    path = pathlib.Path(arg)
    return str(path.relative_to(REPO)) if path.is_absolute() and path.is_relative_to(REPO) else arg


def combine(a, label, tm_cmd, pt_cmd, tm_saved, tm_runs, pt_runs) -> dict:
    tm, pt = tm_runs[0], pt_runs[0]
    peaks = {p["memory"]["peak_allocated_bytes"] for p in pt_runs}
    tm_ms = [median_after(t["steps"], a.warmup) for t in tm_runs]
    pt_ms = [p["step_ms_median"] for p in pt_runs]
    trainmem_side = {
        "peak_allocated_bytes": tm["memory"]["peak_allocated_bytes"],
        "peak_reserved_bytes": tm["memory"]["peak_reserved_bytes"],
        "by_category": {c: tm["memory"]["by_category"].get(c, {}).get("peak_bytes", 0) for c in CATEGORIES},
        "step_ms_per_round": tm_ms, "step_ms_median": statistics.median(tm_ms),
        "saved_activations": {"bytes": sum(t["bytes"] for t in tm_saved),
                              "by_region": trainmem_saved.bytes_by_region(tm_saved), "tensors": tm_saved},
        "final_loss": tm["steps"][-1]["loss"], "first_loss": tm["steps"][0]["loss"],
    }
    torch_side = {
        "version": pt["framework"]["version"], "threads": pt["framework"]["threads"],
        "peak_allocated_bytes": pt["memory"]["peak_allocated_bytes"],
        "peak_reserved_bytes": pt["memory"].get("peak_reserved_bytes"),
        "peak_allocated_bytes_per_round": sorted(peaks),
        "memory_source": pt["memory"]["source"],
        "by_category": {c: pt["memory"]["by_category"][c]["peak_bytes"] for c in CATEGORIES},
        "torch_categories": pt["memory"]["torch_categories"],
        "step_ms_per_round": pt_ms, "step_ms_median": statistics.median(pt_ms),
        "saved_activations": pt["saved_activations"],
        "final_loss": pt["steps"][-1]["loss"], "first_loss": pt["steps"][0]["loss"],
    }
    ratio = lambda x, y: x / y if y else None  # noqa: E731
    return {
        "kind": "trainmem beside PyTorch",
        "label": label,
        "config": {"model": tm["config"]["model"], "batch": a.batch, "precision": a.precision,
                   "set_to_none": not a.keep_grads, "data": a.data, "seed": a.seed, "rounds": a.rounds,
                   "warmup": a.warmup, "steps": a.steps, "threads": a.threads,
                   "omp_wait_policy": pt["framework"]["omp_wait_policy"]},
        "device": {**pt["device"], "trainmem": tm.get("device", {})},
        "commands": {"trainmem": " ".join(["trainmem"] + tm_cmd[1:]),
                     "pytorch": " ".join(["python"] + [shown(arg) for arg in pt_cmd[1:]])},
        "trainmem": trainmem_side,
        "pytorch": torch_side,
        "saved_activations": saved_comparison(tm_saved, pt["saved_activations"]),
        "ratios": {"peak_allocated": ratio(trainmem_side["peak_allocated_bytes"], torch_side["peak_allocated_bytes"]),
                   "step_time": ratio(trainmem_side["step_ms_median"], torch_side["step_ms_median"]),
                   "saved_activations": ratio(trainmem_side["saved_activations"]["bytes"],
                                              torch_side["saved_activations"]["bytes"])},
    }


if __name__ == "__main__":
    sys.exit(main())
