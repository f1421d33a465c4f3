"""The trainmem program, as the PyTorch reference uses it: to find it, to learn a model's shape from
it (the presets live once, in common/model/model_config.cpp), and to write the token file both
trainers read (`trainmem tokens`, suites/trainmem/cli_tokens.cpp).
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[2]
SHAPE_FLAGS = ("layers", "heads", "dim", "seq", "vocab")


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


def run_trainmem(trainmem: pathlib.Path, args: list[str]) -> subprocess.CompletedProcess:
    run = subprocess.run([str(trainmem), *args], capture_output=True, text=True)
    if run.returncode != 0:
        raise TrainmemError(f"trainmem {' '.join(args)}: exit {run.returncode}: "
                            f"{run.stderr.strip().splitlines()[-1] if run.stderr.strip() else run.stdout[-500:]}")
    return run


def model_shape(trainmem: pathlib.Path, model: str, overrides: dict[str, int | None]) -> dict:
    """The model trainmem builds for `--model MODEL` and the given --layers/--heads/... overrides:
    {"name", "vocab", "seq", "layers", "heads", "dim", "parameters"} (`trainmem estimate --json`)."""
    args = ["estimate", "--model", model, "--batch", "1", "--json"]
    for flag in SHAPE_FLAGS:
        if overrides.get(flag) is not None:
            args += [f"--{flag}", str(overrides[flag])]
    return json.loads(run_trainmem(trainmem, args).stdout)["config"]["model"]


def write_tokens(trainmem: pathlib.Path, data: str, out: pathlib.Path, seed: int) -> pathlib.Path:
    """`trainmem tokens`: --data synthetic (train's generator, same seed) or any file -> a .tok file."""
    run_trainmem(trainmem, ["tokens", "--data", data, "--seed", str(seed), "--out", str(out)])
    return out
