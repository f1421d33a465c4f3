"""The trainmem program, as the PyTorch reference uses it: to find it, to learn a model's shape from
it (the presets live once, in common/model/model_config.cpp), and to write the token file both
trainers read (`trainmem tokens`, suites/trainmem/cli_tokens.cpp).
"""
from __future__ import annotations

import json
import os
import pathlib
import statistics
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[2]


def boolean(text: str) -> bool:
    """A true/false flag's value, as trainmem reads it (--tied-head true)."""
    if text.lower() not in ("true", "false"):
        raise ValueError(f"{text!r} is not true or false")
    return text.lower() == "true"


# trainmem's shape flags (suites/trainmem/train_flags.cpp), by argparse name: --kv-heads is kv_heads. Their
# names are also those of trainmem's JSON model (ModelConfig.from_trainmem reads them), but for the
# mixture of experts' (MOE_FLAGS), which trainmem's JSON writes in its "experts" object.
MOE_FLAGS = {"experts": int, "experts_per_token": int, "expert_ffn_dim": int, "shared_expert_ffn_dim": int,
             "normalize_top_k": boolean, "router_aux_loss": float}
SHAPE_FLAGS = {"arch": str, "layers": int, "heads": int, "kv_heads": int, "dim": int, "ffn_dim": int, "seq": int,
               "vocab": int, "rope_theta": float, "norm_eps": float, "head_dim": int, "tied_head": boolean,
               "qkv_bias": boolean, **MOE_FLAGS}


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def shape_args(values: dict) -> list[str]:
    """The shape flags given (not None) in `values`, as trainmem's arguments (a bool as true or false)."""
    def text(value) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)
    return [arg for name in SHAPE_FLAGS if values.get(name) is not None for arg in (flag(name), text(values[name]))]


class TrainmemError(RuntimeError):
    """trainmem could not be found or refused the request; the message says which and why."""


def find_trainmem(explicit: str | None = None) -> pathlib.Path:
    """--trainmem PATH, else $TRAINMEM_BUILD_DIR/suites/trainmem/trainmem, else build/cpu's, build/ci's."""
    if explicit:
        candidates = [pathlib.Path(explicit)]
    else:
        builds = [os.environ["TRAINMEM_BUILD_DIR"]] if os.environ.get("TRAINMEM_BUILD_DIR") else []
        builds += [str(REPO / "build" / "cpu"), str(REPO / "build" / "ci")]
        candidates = [pathlib.Path(b) / "suites" / "trainmem" / "trainmem" for b in builds]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise TrainmemError("no trainmem program found (looked for " + ", ".join(map(str, candidates)) +
                        "): build it (cmake --preset cpu && cmake --build build/cpu --target trainmem) "
                        "or give --trainmem PATH")


def find_trainmem_and_torch(explicit: str | None, python: str, program: str) -> pathlib.Path:
    """The trainmem program (find_trainmem), once `python` is known to import torch: what both
    comparisons (compare_torch.py, speed_torch.py) need before they run anything."""
    trainmem = find_trainmem(explicit)
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0:
        raise TrainmemError(f"PyTorch is not installed for {python}: run ci/setup-torch, then "
                            f".venv-torch/bin/python -m reports.peers.{program} ... (or give --python)")
    return trainmem


def comparison_env(threads: int, omp_wait_policy: str) -> dict[str, str]:
    """The environment both programs of a comparison run in: `threads` threads for trainmem (its
    own pool, TRAINMEM_CPU_THREADS, and OpenBLAS's, OPENBLAS_NUM_THREADS; oneMKL's sequential layer
    has none), PyTorch's set by torch_train --threads; PyTorch's OpenMP wait policy unless "inherit"."""
    env = {**os.environ, "TRAINMEM_CPU_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads)}
    if omp_wait_policy != "inherit":
        env["OMP_WAIT_POLICY"] = omp_wait_policy
    return env


def median_after(steps: list[dict], warmup: int) -> float:
    """The median step time ("ms") of a run's steps after the first `warmup`."""
    return statistics.median(s["ms"] for s in steps[warmup:])


class RunFailed(RuntimeError):
    """A program a comparison ran exited with an error; the message ends with its output's last lines."""


def run_command(cmd: list[str], env: dict) -> None:
    """Runs cmd from the repository root; RunFailed if it fails."""
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RunFailed(f"{' '.join(cmd)}: exit {done.returncode}: " + " / ".join(tail))


def run_trainmem(trainmem: pathlib.Path, args: list[str]) -> subprocess.CompletedProcess:
    run = subprocess.run([str(trainmem), *args], capture_output=True, text=True)
    if run.returncode != 0:
        raise TrainmemError(f"trainmem {' '.join(args)}: exit {run.returncode}: "
                            f"{run.stderr.strip().splitlines()[-1] if run.stderr.strip() else run.stdout[-500:]}")
    return run


def model_shape(trainmem: pathlib.Path, model: str | None, overrides: dict) -> dict:
    """The model trainmem builds for `--model MODEL` (None: its default) and the given shape flags:
    {"name", "arch", "vocab", "padded_vocab", "seq", "layers", "heads", "kv_heads", "dim", "ffn_dim",
    "parameters"} and a Llama's "rope_theta", "norm_eps", "head_dim", "tied_head", "qkv_bias", where
    scaled "rope_scaling", and for a mixture of experts "experts" (`trainmem info --json`)."""
    args = ["info", "--device", "cpu", *(["--model", model] if model else []), *shape_args(overrides), "--json"]
    return json.loads(run_trainmem(trainmem, args).stdout)["model"]


def write_tokens(trainmem: pathlib.Path, data: str, out: pathlib.Path, seed: int) -> pathlib.Path:
    """`trainmem tokens`: --data synthetic (train's generator, same seed) or any file -> a .tok file."""
    run_trainmem(trainmem, ["tokens", "--data", data, "--seed", str(seed), "--out", str(out)])
    return out
