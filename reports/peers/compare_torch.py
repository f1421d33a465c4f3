"""trainmem beside PyTorch: the same model (GPT-2 or Llama, torch_gpt.py or torch_llama.py by the
model's arch), the same weights, the same tokens, the same optimizer, one file with both.

  .venv-torch/bin/python -m reports.peers.compare_torch --model small --batch 4 --out reports/out/DIR
  .venv-torch/bin/python -m reports.peers.compare_torch --model gpt2-124m --layers 2 --seq 256 --batch 4
  .venv-torch/bin/python -m reports.peers.compare_torch --model llama-tiny --batch 4
  .venv-torch/bin/python -m reports.peers.compare_torch --model llama-small --kv-heads 1 --batch 4

Two pairings of how long a gradient lives, each side's way (--grads both, the default, runs both):
  persistent  trainmem --grads persistent  beside  PyTorch zero_grad(set_to_none=False) (torch_train --keep-grads)
  on-demand   trainmem --grads on-demand   beside  PyTorch zero_grad(set_to_none=True), PyTorch's default

1. `trainmem tokens` writes the tokens (--data synthetic: train's own generator and seed; or any
   file) as a .tok file in the output folder; both trainers read that file.
2. One `trainmem train --record-memory` run, not timed, gives trainmem's saved activations.
3. --rounds rounds; each runs, for every pairing, `trainmem train --json` then `torch_train.py`
   (interleaved, so that a change of the machine's load falls on both), after noting the load
   average (os.getloadavg). Each run reports the median of its steps after --warmup; the file keeps
   every round and their median. Memory figures do not change between rounds (trainmem's are
   exact; both sides' per-round peaks are kept to show it). PyTorch starts from trainmem's weights
   (torch_train --init trainmem; --init torch: torch's own draw, for models too large to draw them
   in Python quickly), so the two sides' losses are the same run's: each pairing keeps both
   sides' losses of the first round and their largest difference.
4. peer-torch-<label>.json: per pairing, both sides' peak allocated, bytes by category, what is
   held between steps, step time and the ratios; the saved activations by part of the model (with
   PyTorch's extras named); and issue 18's goals (GOALS below), each with its ratio and whether it
   is met: figures, not asserts. `python3 -m reports.trainmem_report render DIR` shows it as
   "trainmem beside PyTorch".

Both use --threads threads (torch.set_num_threads; TRAINMEM_CPU_THREADS and OPENBLAS_NUM_THREADS for trainmem).
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
import sys
import tempfile

from ..trainmem_report.output_file import write_file
from ..trainmem_report.peers import CATEGORIES
from ..trainmem_report.result_schema import PEAK_ALLOCATED, PEAK_RESERVED
from . import trainmem_saved
from .model_config import ARCHS
from .trainmem_program import (REPO, SHAPE_FLAGS, RunFailed, TrainmemError, comparison_env, find_trainmem_and_torch,
                               flag, median_after, run_command, shape_args, write_tokens)


# trainmem's --grads and the PyTorch zero_grad(set_to_none=...) that does the same: the pairings.
PAIRINGS = {"persistent": False, "on-demand": True}

# Issue 18's goals, per pairing: trainmem's figure at most LIMIT times PyTorch's. (measure, its words)
GOALS = ((PEAK_ALLOCATED, "peak allocated"), ("step_ms_median", "step time"))
LIMIT = 1.0


def pytorch_extra(t: dict) -> str | None:
    """Why a tensor PyTorch saves has no counterpart in trainmem, or None if it has one: what the
    model named (torch_llama.py's RoPE tables, RMSNorm's x * rstd, silu(gate)), the causal mask
    (trainmem's attention kernel tests j > i instead), the positions 0..T-1 (trainmem's embedding
    kernel counts them), and nll_loss's total weight (trainmem sums the loss on the host)."""
    if t.get("extra"):
        return t["extra"]
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


def goals(pairings: dict[str, dict], device_kind: str) -> list[dict]:
    """Every goal of every pairing measured: the two figures, their ratio, and whether it is met
    (trainmem / PyTorch <= LIMIT). On the CPU the time goal is the CPU step time's."""
    out = []
    for name, p in pairings.items():
        for measure, words in GOALS:
            if measure == "step_ms_median" and device_kind == "cpu":
                words = "CPU step time"
            tm, pt = p["trainmem"][measure], p["pytorch"][measure]
            ratio = tm / pt if pt else None
            out.append({"goal": f"{words} <= {LIMIT:.2f}x PyTorch's: --grads {name} vs set_to_none={PAIRINGS[name]}",
                        "pairing": name, "measure": measure, "trainmem": tm, "pytorch": pt, "ratio": ratio,
                        "at_most": LIMIT, "met": ratio is not None and ratio <= LIMIT})
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m reports.peers.compare_torch", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="small")
    for name, kind in SHAPE_FLAGS.items():
        p.add_argument(flag(name), type=kind, **({"choices": ARCHS} if name == "arch" else {}))
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--grads", choices=("both",) + tuple(PAIRINGS), default="both",
                   help="the pairings to run: persistent (PyTorch set_to_none=False), on-demand "
                        "(set_to_none=True) or both [both]")
    p.add_argument("--data", default="synthetic", help="synthetic or any file, through `trainmem tokens`")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--init", choices=("trainmem", "torch"), default="trainmem",
                   help="PyTorch's initial weights: trainmem's (the same run) or torch's own draw [trainmem]")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--omp-wait-policy", choices=("PASSIVE", "ACTIVE", "inherit"), default="PASSIVE",
                   help="OMP_WAIT_POLICY for PyTorch (inherit: as this shell has it) [PASSIVE]")
    p.add_argument("--out", type=pathlib.Path, default=REPO / "reports" / "out" / "peers")
    p.add_argument("--label", help="the file is peer-torch-LABEL.json [model-B<batch>-<precision>[-<grads>]]")
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
        trainmem = find_trainmem_and_torch(a.trainmem, a.python, "compare_torch")
    except TrainmemError as e:
        print(f"compare_torch: error: {e}", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    shape = shape_args(vars(a))
    label = a.label or f"{a.model}{''.join(shape).replace('--', '-')}-B{a.batch}-{a.precision}" + \
        ("" if a.grads == "both" else f"-{a.grads}")
    names = list(PAIRINGS) if a.grads == "both" else [a.grads]
    env = comparison_env(a.threads, a.omp_wait_policy)
    try:
        tokens = write_tokens(trainmem, a.data, a.out / f"peer-torch-{label}.tok", a.seed)
        common = ["--model", a.model, *shape, "--batch", str(a.batch), "--data", str(tokens)]
        tm_base = [str(trainmem), "train", *common, "--precision", a.precision, "--seed", str(a.seed),
                   "--device", "cpu"]
        pt_base = [a.python, "-m", "reports.peers.torch_train", *common, "--precision", a.precision,
                   "--warmup", str(a.warmup), "--steps", str(a.steps), "--threads", str(a.threads),
                   "--seed", str(a.seed), "--init", a.init, "--trainmem", str(trainmem)]
        commands = {name: {"trainmem": tm_base + ["--steps", str(a.warmup + a.steps), "--grads", name],
                           "pytorch": pt_base + ([] if PAIRINGS[name] else ["--keep-grads"])} for name in names}
        runs = {name: {"trainmem": [], "pytorch": []} for name in names}
        loads = []
        with tempfile.TemporaryDirectory(dir=a.out, prefix=".peer-torch-") as tmp:
            tmp = pathlib.Path(tmp)
            print(f"compare_torch: {label}: trainmem --record-memory (saved activations)", file=sys.stderr)
            run_command(tm_base + ["--steps", "1", "--record-memory", str(tmp / "trace.json")], env)
            tm_saved = trainmem_saved.saved_activations(json.loads((tmp / "trace.json").read_text()))
            for r in range(a.rounds):
                loads.append(list(os.getloadavg()))
                print(f"compare_torch: {label}: round {r + 1}/{a.rounds} (load average {loads[-1][0]:.1f})",
                      file=sys.stderr)
                for name in names:
                    for side in ("trainmem", "pytorch"):
                        run_command(commands[name][side] + ["--json", str(tmp / "run.json")], env)
                        runs[name][side].append(json.loads((tmp / "run.json").read_text()))
    except (TrainmemError, RunFailed, ValueError, OSError) as e:
        print(f"compare_torch: error: {e}", file=sys.stderr)
        return 1
    result = combine(a, label, commands, runs, tm_saved)
    # Other work on the machine slows both sides (times only; memory figures do not depend on it).
    result["machine"] = {"cpu_cores": os.cpu_count(), "load_avg_before": list(load_before),
                         "load_avg_per_round": loads, "load_avg_after": list(os.getloadavg())}
    path = a.out / f"peer-torch-{label}.json"
    write_file(path, lambda p: p.write_text(json.dumps(result, indent=2) + "\n"))
    print(f"compare_torch: {path}: saved activations equal but for PyTorch's extras: "
          f"{result['saved_activations']['equal']}", file=sys.stderr)
    for g in result["goals"]:
        print(f"compare_torch: {g['goal']}: {g['ratio']:.3f} ({'met' if g['met'] else 'not met'})", file=sys.stderr)
    return 0


def shown(arg: str) -> str:
    """A path inside the repository as a relative one (the commands are shown in the report)."""
    path = pathlib.Path(arg)
    return str(path.relative_to(REPO)) if path.is_absolute() and path.is_relative_to(REPO) else arg


def trainmem_side(runs: list[dict], warmup: int) -> dict:
    """trainmem's figures from its rounds' `train --json` results."""
    tm = runs[0]
    ms = [median_after(t["steps"], warmup) for t in runs]
    return {
        "grads": tm["config"]["grads"],
        PEAK_ALLOCATED: tm["memory"][PEAK_ALLOCATED],
        PEAK_RESERVED: tm["memory"][PEAK_RESERVED],
        "peak_allocated_bytes_per_round": sorted({t["memory"][PEAK_ALLOCATED] for t in runs}),
        "by_category": {c: tm["memory"]["by_category"].get(c, {}).get("peak_bytes", 0) for c in CATEGORIES},
        # after the last step: what one step leaves for the next
        "held_between_steps": {"allocated_bytes": tm["steps"][-1]["allocated_bytes"],
                               "gradients_bytes": tm["memory"]["by_category"]["gradients"]["current_bytes"]},
        "step_ms_per_round": ms, "step_ms_median": statistics.median(ms),
        "first_loss": tm["steps"][0]["loss"], "final_loss": tm["steps"][-1]["loss"],
    }


def pytorch_side(runs: list[dict]) -> dict:
    """PyTorch's figures from its rounds' torch_train.py results."""
    pt = runs[0]
    ms = [p["step_ms_median"] for p in runs]
    return {
        "version": pt["framework"]["version"], "threads": pt["framework"]["threads"],
        "set_to_none": pt["config"]["set_to_none"],
        PEAK_ALLOCATED: pt["memory"][PEAK_ALLOCATED],
        PEAK_RESERVED: pt["memory"].get(PEAK_RESERVED),
        "peak_allocated_bytes_per_round": sorted({p["memory"][PEAK_ALLOCATED] for p in runs}),
        "memory_source": pt["memory"]["source"],
        "by_category": {c: pt["memory"]["by_category"][c]["peak_bytes"] for c in CATEGORIES},
        "torch_categories": pt["memory"]["torch_categories"],
        # the measured step's start: what the step before it left
        "held_between_steps": {"allocated_bytes": pt["memory"]["at_start_bytes"],
                               "gradients_bytes": pt["memory"]["by_category"]["gradients"]["at_start_bytes"]},
        "step_ms_per_round": ms, "step_ms_median": statistics.median(ms),
        "first_loss": pt["steps"][0]["loss"], "final_loss": pt["steps"][-1]["loss"],
    }


def losses(tm_run: dict, pt_run: dict) -> dict:
    """Both sides' loss at every step of one round, and their largest difference: the same run's
    with --init trainmem (the same weights, tokens and AdamW), two alike runs' with --init torch."""
    tm, pt = [s["loss"] for s in tm_run["steps"]], [s["loss"] for s in pt_run["steps"]]
    return {"init": pt_run["config"]["init"], "trainmem": tm, "pytorch": pt,
            "max_abs_difference": max(abs(x - y) for x, y in zip(tm, pt))}


def combine(a, label, commands, runs, tm_saved) -> dict:
    pairings = {}
    for name, sides in runs.items():
        tm, pt = trainmem_side(sides["trainmem"], a.warmup), pytorch_side(sides["pytorch"])
        pairings[name] = {
            "commands": {"trainmem": " ".join(["trainmem"] + commands[name]["trainmem"][1:]),
                         "pytorch": " ".join(["python"] + [shown(arg) for arg in commands[name]["pytorch"][1:]])},
            "trainmem": tm, "pytorch": pt,  # each side's settings as its own result states them
            "losses": losses(sides["trainmem"][0], sides["pytorch"][0]),
        }
    first = next(iter(runs.values()))
    tm_run, pt_run = first["trainmem"][0], first["pytorch"][0]
    # The saved activations do not depend on how long the gradients live: one trace, one PyTorch run.
    pt_saved = pt_run["saved_activations"]
    tm_saved_bytes = sum(t["bytes"] for t in tm_saved)
    return {
        "kind": "trainmem beside PyTorch",
        "label": label,
        "config": {"model": tm_run["config"]["model"], "batch": a.batch, "precision": a.precision,
                   "data": a.data, "seed": a.seed, "init": a.init, "rounds": a.rounds, "warmup": a.warmup, "steps": a.steps,
                   "threads": a.threads, "omp_wait_policy": pt_run["framework"]["omp_wait_policy"]},
        "device": {**pt_run["device"], "trainmem": tm_run.get("device", {})},
        "pairings": pairings,
        "goals": goals(pairings, pt_run["device"]["kind"]),
        "saved_activations": {
            **saved_comparison(tm_saved, pt_saved),
            "trainmem": {"bytes": tm_saved_bytes, "by_region": trainmem_saved.bytes_by_region(tm_saved),
                         "tensors": tm_saved},
            "pytorch": pt_saved,
            "ratio": tm_saved_bytes / pt_saved["bytes"],
        },
    }


if __name__ == "__main__":
    sys.exit(main())
