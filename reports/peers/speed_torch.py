"""trainmem's CPU step time beside PyTorch's, interleaved, under each GEMM kernel family (issue 41).

  .venv-torch/bin/python -m reports.peers.speed_torch --model small --batch 4 --rounds 5 \\
      --family own --family avx2:MKL_ENABLE_INSTRUCTIONS=AVX2 --out reports/out/DIR
  .venv-torch/bin/python -m reports.peers.speed_torch --model gpt2-124m --layers 2 --seq 256 --batch 4 \\
      --warmup 2 --steps 4 --rounds 5 --family own --family avx2:MKL_ENABLE_INSTRUCTIONS=AVX2

The same model (torch_gpt.py or torch_llama.py), the same tokens and the same AdamW as
compare_torch.py, but times only: PyTorch runs torch_train --time-only (no profiled step: its
memory timeline takes minutes at the 124M shape) and draws its own weights (--init torch: the time
of a step does not depend on the values). Gradients: trainmem --grads on-demand beside
zero_grad(set_to_none=True), PyTorch's default. ci/suite runs it for the report's shapes when
ci/setup-torch has installed PyTorch.

A kernel family (--family NAME[:VAR=VALUE,...], repeatable; default: own) is a set of environment
variables given to both programs: `own` gives none (each library picks its kernels for this CPU);
MKL_ENABLE_INSTRUCTIONS=AVX2 makes oneMKL, which trainmem (cmake/TrainmemCpuBlas.cmake) and
PyTorch's products both run on, take its AVX2 code path; OPENBLAS_CORETYPE=Haswell changes
OpenBLAS's kernels (only a trainmem built on OpenBLAS uses them). Each round runs every family,
both programs back to back (trainmem first in odd rounds, PyTorch first in even ones), after noting
the load average, so a change of the machine's speed falls on both. Each run's figure is the median of its steps after --warmup; per family, the file keeps every
round's pair, each round's ratio, and the median of those ratios, which is what the goal (trainmem
at most GOAL_RATIO x PyTorch's step time) is judged on: a figure, not an assert.
Output: peer-speed-<label>.json (the report's "CPU step time beside PyTorch").
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
from ..trainmem_report.peer_speed import SPEED_KIND
from .model_config import ARCHS
from .trainmem_program import (REPO, SHAPE_FLAGS, RunFailed, TrainmemError, comparison_env, find_trainmem_and_torch,
                               flag, median_after, run_command, shape_args, write_tokens)

GOAL_RATIO = 0.8  # issue 41: trainmem's CPU step at most 0.8x PyTorch's, under every kernel family


def parse_family(text: str) -> tuple[str, dict[str, str]]:
    """NAME[:VAR=VALUE,...] -> (NAME, {VAR: VALUE})."""
    name, _, assignments = text.partition(":")
    env = {}
    for item in filter(None, assignments.split(",")):
        var, eq, value = item.partition("=")
        if not eq or not var or not var.replace("_", "").isalnum():
            raise argparse.ArgumentTypeError(f"--family {text}: '{item}' is not VAR=VALUE")
        env[var] = value
    if not name:
        raise argparse.ArgumentTypeError(f"--family {text}: needs a name before the ':'")
    return name, env


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m reports.peers.speed_torch", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="small")
    for name, kind in SHAPE_FLAGS.items():
        p.add_argument(flag(name), type=kind, **({"choices": ARCHS} if name == "arch" else {}))
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--family", type=parse_family, action="append",
                   help="NAME[:VAR=VALUE,...]: the environment of both programs for one kernel family [own]")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--omp-wait-policy", choices=("PASSIVE", "ACTIVE", "inherit"), default="PASSIVE",
                   help="PyTorch's OpenMP threads (compare_torch.py says why PASSIVE) [PASSIVE]")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=pathlib.Path, default=REPO / "reports" / "out" / "peers")
    p.add_argument("--label", help="the file is peer-speed-LABEL.json [model-shape-B<batch>]")
    p.add_argument("--trainmem", help="the trainmem program (default: the build folder's)")
    p.add_argument("--python", default=sys.executable, help="the Python with torch [this one]")
    a = p.parse_args(argv)
    a.family = a.family or [("own", {})]
    if len({name for name, _ in a.family}) != len(a.family):
        p.error("--family: two families with one name")
    for name in ("batch", "rounds", "steps", "threads", "warmup"):
        if getattr(a, name) < 1:
            p.error(f"--{name}: must be at least 1 (--warmup: trainmem's first step allocates Adam's moments)")
    return a


def commands(a: argparse.Namespace, trainmem: pathlib.Path, tokens: pathlib.Path) -> dict[str, list[str]]:
    """The two programs' command lines (each run adds --json FILE)."""
    common = ["--model", a.model, *shape_args(vars(a)), "--batch", str(a.batch), "--data", str(tokens)]
    return {
        "trainmem": [str(trainmem), "train", *common, "--device", "cpu", "--seed", str(a.seed), "--grads", "on-demand",
                     "--steps", str(a.warmup + a.steps)],
        "pytorch": [a.python, "-m", "reports.peers.torch_train", *common, "--warmup", str(a.warmup), "--steps",
                    str(a.steps), "--threads", str(a.threads), "--seed", str(a.seed), "--init", "torch", "--time-only",
                    "--trainmem", str(trainmem)],
    }


def family_result(name: str, env: dict[str, str], tm_runs: list[dict], pt_runs: list[dict], warmup: int) -> dict:
    """One family's rounds -> its figures and the goal's verdict on the median of the rounds' ratios."""
    tm = [median_after(r["steps"], warmup) for r in tm_runs]
    pt = [r["step_ms_median"] for r in pt_runs]
    ratios = [t / p for t, p in zip(tm, pt)]
    ratio = statistics.median(ratios)
    device = tm_runs[0].get("device", {})
    return {"name": name, "env": env,
            "trainmem": {"step_ms_per_round": tm, "step_ms_median": statistics.median(tm),
                         "gemm": device.get("cpu_gemm"), "gemm_kernels": device.get("cpu_gemm_kernels")},
            "pytorch": {"step_ms_per_round": pt, "step_ms_median": statistics.median(pt),
                        "version": pt_runs[0]["framework"]["version"]},
            "ratio_per_round": ratios, "ratio": ratio, "at_most": GOAL_RATIO, "met": ratio <= GOAL_RATIO}


def run(cmd: list[str], env: dict, json_path: pathlib.Path) -> dict:
    run_command(cmd + ["--json", str(json_path)], env)
    return json.loads(json_path.read_text())


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    load_before = os.getloadavg()
    try:
        trainmem = find_trainmem_and_torch(a.trainmem, a.python, "speed_torch")
    except TrainmemError as e:
        print(f"speed_torch: error: {e}", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    label = a.label or f"{a.model}{''.join(shape_args(vars(a))).replace('--', '-')}-B{a.batch}"
    base_env = comparison_env(a.threads, a.omp_wait_policy)
    runs = {name: {"trainmem": [], "pytorch": []} for name, _ in a.family}
    loads = []
    try:
        tokens = write_tokens(trainmem, "synthetic", a.out / f"peer-speed-{label}.tok", a.seed)
        cmds = commands(a, trainmem, tokens)
        with tempfile.TemporaryDirectory(dir=a.out, prefix=".peer-speed-") as tmp:
            for r in range(a.rounds):
                loads.append(list(os.getloadavg()))
                print(f"speed_torch: {label}: round {r + 1}/{a.rounds} (load average {loads[-1][0]:.1f})",
                      file=sys.stderr)
                # The order alternates between rounds (trainmem first, then PyTorch first): the
                # machine's speed drifts by tens of percent within an hour, and a fixed order would
                # give the drift's direction to one side.
                sides = ("trainmem", "pytorch") if r % 2 == 0 else ("pytorch", "trainmem")
                for name, env in a.family:
                    for side in sides:
                        runs[name][side].append(run(cmds[side], {**base_env, **env}, pathlib.Path(tmp) / "run.json"))
    except (TrainmemError, RunFailed, ValueError, OSError) as e:
        print(f"speed_torch: error: {e}", file=sys.stderr)
        return 1
    first = runs[a.family[0][0]]["trainmem"][0]
    result = {
        "kind": SPEED_KIND, "label": label,
        "config": {"model": first["config"]["model"], "batch": a.batch, "rounds": a.rounds, "warmup": a.warmup,
                   "steps": a.steps, "threads": a.threads,
                   "omp_wait_policy": runs[a.family[0][0]]["pytorch"][0]["framework"]["omp_wait_policy"]},
        "commands": {"trainmem": " ".join(["trainmem"] + cmds["trainmem"][1:]),
                     "pytorch": " ".join(["python"] + cmds["pytorch"][1:])},
        "families": [family_result(name, env, runs[name]["trainmem"], runs[name]["pytorch"], a.warmup)
                     for name, env in a.family],
        "machine": {"cpu_cores": os.cpu_count(), "cpu_model": first.get("device", {}).get("cpu_model"),
                    "load_avg_before": list(load_before), "load_avg_per_round": loads,
                    "load_avg_after": list(os.getloadavg())},
    }
    path = a.out / f"peer-speed-{label}.json"
    write_file(path, lambda p: p.write_text(json.dumps(result, indent=2) + "\n"))
    for f in result["families"]:
        print(f"speed_torch: {label}, family {f['name']}: trainmem {f['trainmem']['step_ms_median']:.1f} ms, PyTorch "
              f"{f['pytorch']['step_ms_median']:.1f} ms: {f['ratio']:.3f} "
              f"({'met' if f['met'] else 'not met'}: at most {GOAL_RATIO})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
