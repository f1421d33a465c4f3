"""Trains trainmem's model in PyTorch (torch_gpt.py or torch_llama.py, by the config's arch) and
measures it the way trainmem measures itself: bytes by category and the peak (torch_memory.py), the tensors saved for backward
(saved_activations.py), and the step time (the median of the steps after the warm-up).

  .venv-torch/bin/python -m reports.peers.torch_train --model small --batch 4 --data corpus.tok \
      --json torch-small.json
  .venv-torch/bin/python -m reports.peers.torch_train --model llama-tiny --kv-heads 1 --data corpus.tok

--init trainmem starts from the weights `trainmem train --seed SEED` starts from (trainmem_init.py
draws them as trainmem does, about 0.4 s per million parameters), so the losses of the two can be
compared step by step; --init torch (the default) draws them with torch's generator.

The run is trainmem's `train` with its defaults (suites/trainmem/train_flags.h,
common/train/trainer.h, kernels/adamw.h): AdamW lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight decay 0,
the global gradient norm clipped to 1.0; batch k row b is the window of T tokens from
(k * B + b) * T, wrapping at the end (common/data/batch_source.h). Gradients are freed after each
step (zero_grad(set_to_none=True), PyTorch's default); --keep-grads zeroes them in place instead,
as trainmem does. --precision bf16 stores the model in bf16 and gives the optimizer fp32 master
weights, as trainmem's mixed precision does (common/train/master_weights.h); the fp32
copies of the gradients that torch.optim needs are PyTorch's own cost.

On a machine shared with other work, run it with OMP_WAIT_POLICY=PASSIVE (compare_torch.py does):
PyTorch's OpenMP threads spin at every barrier by default, and lose whole time slices when the
cores are busy.

Steps: --warmup untimed steps, then --steps timed ones (median), then one more step measured
(the profiler slows it, so it is not timed): the memory timeline, or torch.cuda.memory_stats(),
and the saved tensors. --time-only leaves that step out ("memory" and "saved_activations" are then
null): the profiler's timeline takes minutes at the 124M shape (one thread, Python), and a speed
comparison (speed_torch.py) needs only the times.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import time

try:
    import torch
except ModuleNotFoundError:
    print("torch_train: error: PyTorch is not installed for this Python: run ci/setup-torch, then "
          ".venv-torch/bin/python -m reports.peers.torch_train ...", file=sys.stderr)
    sys.exit(2)

from ..trainmem_report.output_file import write_file
from .saved_activations import SavedTensorLog
from .token_file import TokenFileError, read_token_file
from .model_config import ARCHS, ModelConfig, shape_of
from .torch_gpt import GPT
from .torch_llama import Llama
from .torch_memory import measure_step
from .trainmem_init import set_trainmem_values
from .trainmem_program import MOE_FLAGS, SHAPE_FLAGS, TrainmemError, find_trainmem, flag, model_shape

FAMILIES = {"gpt": GPT, "llama": Llama}  # ModelConfig.arch -> the PyTorch model

ADAMW = {"betas": (0.9, 0.95), "eps": 1e-8}  # kernels/adamw.h's AdamWHyper


class Batches:
    """common/data/batch_source.h's SequentialBatches: consecutive windows, wrapping at the end. The
    dataset stays a host array, as trainmem keeps it on the host: only each batch becomes a tensor
    (int64 [B, T], what nn.Embedding and cross_entropy take), so the profiler counts only the batch."""

    def __init__(self, tokens, batch: int, seq: int, device: torch.device):
        if len(tokens) < batch * seq + 1:
            raise TokenFileError(f"the dataset has {len(tokens)} tokens; one batch needs {batch * seq + 1}")
        self.data, self.B, self.T, self.position, self.device = tokens, batch, seq, 0, device

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        rows = []
        for _ in range(self.B):
            if self.position + self.T + 1 > len(self.data):
                self.position = 0
            rows.append(self.data[self.position:self.position + self.T + 1])
            self.position += self.T
        window = torch.tensor(rows, dtype=torch.int64, device=self.device)
        return window[:, :-1].contiguous(), window[:, 1:].contiguous()


class Trainer:
    """One training step: forward, backward, clip, AdamW, free (or zero) the gradients."""

    def __init__(self, model: GPT | Llama, a: argparse.Namespace):
        self.model, self.clip, self.set_to_none = model, a.grad_clip, not a.keep_grads
        self.params = list(model.parameters())
        # bf16: the optimizer updates fp32 master weights and rounds them into the model.
        self.master = [p.detach().float().requires_grad_() for p in self.params] if a.precision == "bf16" else None
        self.optimizer = torch.optim.AdamW(self.master or self.params, lr=a.lr, weight_decay=a.weight_decay, **ADAMW)

    def step(self, batches: Batches, log: SavedTensorLog | None = None) -> tuple[float, float]:
        tokens, targets = batches.next()
        if log is None:
            loss = self.model(tokens, targets)
        else:
            with log.recording(self.params, (tokens, targets)):
                loss = self.model(tokens, targets, regions=log)
        loss.backward()
        if self.master is not None:
            for p, m in zip(self.params, self.master):
                m.grad = p.grad.float()
        norm = torch.nn.utils.clip_grad_norm_(self.master or self.params, self.clip) if self.clip > 0 else \
            torch.zeros(())
        self.optimizer.step()
        if self.master is not None:
            with torch.no_grad():
                for p, m in zip(self.params, self.master):
                    p.copy_(m)
            self.model.zero_grad(set_to_none=self.set_to_none)
        self.optimizer.zero_grad(set_to_none=self.set_to_none)
        return loss.item(), float(norm)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m reports.peers.torch_train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="a trainmem preset (asked of trainmem) [trainmem's default: tiny, or "
                                   "llama-tiny with --arch llama]")
    for name, kind in SHAPE_FLAGS.items():
        p.add_argument(flag(name), type=kind, **({"choices": ARCHS} if name == "arch" else {}),
                       help=f"override the preset's {name}")
    p.add_argument("--trainmem", help="the trainmem program, to learn a preset's shape (default: the build folder's); "
                                      "not needed without --model when every shape flag of the family is given "
                                      "(gpt: --layers --heads --dim --seq --vocab; llama, with --arch llama: also "
                                      "--kv-heads --ffn-dim --rope-theta --norm-eps; a mixture of experts always asks trainmem)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--data", required=True, help="a .tok file (`trainmem tokens --out FILE.tok` writes one)")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--keep-grads", action="store_true",
                   help="zero_grad(set_to_none=False): gradients stay allocated between steps, as trainmem's do")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first [2]")
    p.add_argument("--steps", type=int, default=5, help="timed steps (their median is the step time) [5]")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--grad-clip", type=float, default=1.0, help="global norm; 0: off")
    p.add_argument("--seed", type=int, default=1, help="torch.manual_seed, or trainmem's --seed with --init trainmem")
    p.add_argument("--init", choices=("torch", "trainmem"), default="torch",
                   help="the initial weights: torch's generator, or trainmem's own values [torch]")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads [2]")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--time-only", action="store_true",
                   help="no profiled step at the end: step times only (memory and saved_activations null)")
    p.add_argument("--json", type=pathlib.Path, help="write the result here (whole or not at all)")
    a = p.parse_args(argv)
    for name in ("batch", "steps", "threads"):
        if getattr(a, name) < 1:
            p.error(f"--{name}: must be at least 1, not {getattr(a, name)}")
    for name in ["warmup"] + [n for n, kind in SHAPE_FLAGS.items() if kind is int]:
        least = 2 if name in ("vocab", "experts") else 0 if name in ("warmup", "shared_expert_ffn_dim") else 1
        if getattr(a, name) is not None and getattr(a, name) < least:
            p.error(f"{flag(name)}: too small ({getattr(a, name)})")
    if not (a.lr > 0 and a.weight_decay >= 0 and a.grad_clip >= 0):
        p.error("--lr must be > 0, --weight-decay and --grad-clip >= 0")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: this PyTorch sees no GPU")
    if a.json is not None and not a.json.parent.is_dir():
        p.error(f"--json {a.json}: the folder {a.json.parent} does not exist")
    return a


def resolve_config(a: argparse.Namespace) -> ModelConfig:
    given = {f: getattr(a, f) for f in SHAPE_FLAGS}
    arch = a.arch or "gpt"
    # The flags name trainmem's fields (a mixture's are trainmem's to lay out: its JSON's "experts")
    if a.model is None and all(given[f] is not None for f in shape_of(arch)) and \
            all(given[f] is None for f in MOE_FLAGS):
        return ModelConfig.from_trainmem({"name": "custom", **{f: v for f, v in given.items() if v is not None}})
    return ModelConfig.from_trainmem(model_shape(find_trainmem(a.trainmem), a.model, given))


def make_model(config: ModelConfig, init: str, seed: int) -> GPT | Llama:
    """The config's family in fp32 on the CPU, with torch's initialization or trainmem's values."""
    model = FAMILIES[config.arch](config)
    if init == "trainmem":
        set_trainmem_values(model, seed)
    return model


def device_json(device: torch.device) -> dict:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return {"kind": "cuda", "name": props.name, "total_memory_bytes": props.total_memory,
                "runtime_version": torch.version.cuda}
    return {"kind": "cpu", "name": platform.processor() or platform.machine(), "cpu_cores": os.cpu_count(),
            "load_avg": list(os.getloadavg())}


def run(a: argparse.Namespace) -> dict:
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    config = resolve_config(a)
    device = torch.device(a.device)
    dtype = torch.bfloat16 if a.precision == "bf16" else torch.float32
    model = make_model(config, a.init, a.seed).to(device=device, dtype=dtype)
    batches = Batches(read_token_file(a.data), a.batch, config.seq, device)
    trainer = Trainer(model, a)

    steps = []
    for i in range(a.warmup + a.steps):
        start = time.perf_counter()
        loss, norm = trainer.step(batches)
        if device.type == "cuda":
            torch.cuda.synchronize()
        ms = (time.perf_counter() - start) * 1e3
        steps.append({"step": i + 1, "loss": loss, "grad_norm": norm, "ms": ms, "timed": i >= a.warmup,
                      "tokens_per_s": a.batch * config.seq / (ms / 1e3)})
    memory = saved_activations = None
    if not a.time_only:
        log = SavedTensorLog()
        memory = measure_step(lambda: trainer.step(batches, log), device)
        saved = log.activations()
        saved_activations = {
            "bytes": sum(s.bytes for s in saved),
            "by_region": log.bytes_by_region(),
            "tensors": [s.to_json() for s in saved],
            "not_activations": [s.to_json() for s in log.saved.values() if s.kind != "activation"],
        }
    return {
        "framework": {"name": "pytorch", "version": torch.__version__, "threads": torch.get_num_threads(),
                      "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "python": platform.python_version()},
        "device": device_json(device),
        "config": {"command": "torch_train", "model": {**config.to_json(), "parameters": sum(p.numel() for p in
                                                                                        model.parameters())},
                   "batch": a.batch, "seq": config.seq, "precision": a.precision, "warmup": a.warmup,
                   "steps": a.steps, "lr": a.lr, "weight_decay": a.weight_decay, "grad_clip": a.grad_clip,
                   "betas": list(ADAMW["betas"]), "eps": ADAMW["eps"], "set_to_none": not a.keep_grads,
                   "seed": a.seed, "init": a.init, "data": str(a.data)},
        "steps": steps,
        "step_ms_median": statistics.median(s["ms"] for s in steps if s["timed"]),
        "memory": memory,
        "saved_activations": saved_activations,
    }


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    try:
        result = run(a)
    except (TokenFileError, TrainmemError, ValueError) as e:
        print(f"torch_train: error: {e}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=2) + "\n"
    if a.json is None:
        sys.stdout.write(text)
    else:
        write_file(a.json, lambda p: p.write_text(text))
    timed = [s for s in result["steps"] if s["timed"]]
    memory = "" if a.time_only else (
        f", peak {result['memory']['peak_allocated_bytes'] / 2**20:.2f} MiB, saved activations "
        f"{result['saved_activations']['bytes'] / 2**20:.2f} MiB")
    print(f"torch_train: {result['config']['model']['name']} B={a.batch}: loss {result['steps'][0]['loss']:.4f} -> "
          f"{timed[-1]['loss']:.4f}, median step {result['step_ms_median']:.1f} ms{memory}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
