"""Loading one results folder (what ci/suite writes to reports/out/<date>-<device>/).

A folder holds:
  device.json             `trainmem info --json`: the device, the allocator, the build
  bench_<suite>.json      Google Benchmark JSON, one file per benchmark binary; a binary run at
                          several world sizes (mpirun -np N) adds bench_<suite>-n<N>.json, and
                          the runs of all its files are read as one suite
  train-<name>.json       `trainmem train --json` runs
  memory-trace.json       `trainmem train --record-memory` (the allocator's event log)
  memory-snapshot.json    `trainmem train --memory-snapshot` (PyTorch's snapshot structure)
  peer-torch-<label>.json trainmem beside PyTorch (reports/peers/compare_torch.py); optional

Loading never raises for what is inside the folder: a file that is missing, unreadable or
malformed becomes a line in `ResultFolder.problems`, and the report shows what is there.
"""
from __future__ import annotations

import json
import pathlib
import re
from dataclasses import dataclass, field

# Google Benchmark's time units, in milliseconds.
_MS_PER_UNIT = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}

# What Google Benchmark appends to a name for Iterations(), UseRealTime(), ...: not part of the
# setting, so dropped ("BM_Zero/small/N2/zero3/offload_none/iterations:5/real_time").
_RUN_OPTIONS = re.compile(r"(/(iterations|repeats|threads|min_time|min_warmup_time):[^/]*|/real_time|/manual_time)+$")

# Keys of a benchmark entry that are not counters.
_NOT_COUNTERS = {
    "name", "family_index", "per_family_instance_index", "run_name", "run_type", "repetitions",
    "repetition_index", "threads", "iterations", "real_time", "cpu_time", "time_unit", "label",
    "error_occurred", "error_message", "aggregate_name", "aggregate_unit",
}


@dataclass
class Benchmark:
    """One Google Benchmark run: its name, label, time per iteration and counters."""
    name: str
    label: str
    real_time_ms: float
    counters: dict[str, float]

    def counter(self, key: str, default: float | None = None) -> float | None:
        return self.counters.get(key, default)


@dataclass
class ResultFolder:
    path: pathlib.Path
    device: dict = field(default_factory=dict)       # device.json's "device"
    allocator: dict = field(default_factory=dict)    # device.json's "allocator"
    benchmarks: dict[str, list[Benchmark]] = field(default_factory=dict)  # "bench_baseline" -> runs
    bench_files: dict[str, list[pathlib.Path]] = field(default_factory=dict)  # "bench_zero" -> its files
    contexts: dict[str, dict] = field(default_factory=dict)               # "bench_baseline" -> context
    train_runs: dict[str, dict] = field(default_factory=dict)             # "baseline" -> train JSON
    trace: dict | None = None
    snapshot_path: pathlib.Path | None = None
    peers: dict[str, dict] = field(default_factory=dict)                  # "small-B4-fp32" -> comparison JSON
    problems: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.name

    def device_name(self) -> str:
        d = self.device
        if not d:
            return f"unknown device ({self.name})"
        if d.get("kind") == "cuda":
            return d.get("name", "cuda")
        return f"CPU ({d.get('cpu_model') or d.get('name', '?')})"

    def runs(self, bench: str) -> list[Benchmark]:
        return self.benchmarks.get(bench, [])


def _read_json(path: pathlib.Path, problems: list[str]):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        problems.append(f"{path.name}: unreadable ({type(e).__name__}: {e})")
        return None


def parse_benchmark(entry: dict) -> Benchmark | None:
    """A Google Benchmark entry, or None for aggregates (mean/median of repetitions)."""
    if entry.get("run_type") == "aggregate":
        return None
    unit = _MS_PER_UNIT.get(entry.get("time_unit", "ns"), 1e-6)
    counters = {k: float(v) for k, v in entry.items()
                if k not in _NOT_COUNTERS and isinstance(v, (int, float)) and not isinstance(v, bool)}
    return Benchmark(name=_RUN_OPTIONS.sub("", str(entry["name"])), label=str(entry.get("label", "")),
                     real_time_ms=float(entry["real_time"]) * unit, counters=counters)


def _load_benchmark_file(path: pathlib.Path, folder: ResultFolder) -> None:
    bench = path.stem.split("-", 1)[0]  # bench_zero-n4 -> bench_zero
    folder.benchmarks.setdefault(bench, [])  # present, even if nothing in it can be read
    folder.bench_files.setdefault(bench, []).append(path)
    data = _read_json(path, folder.problems)
    if data is None:
        return
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        folder.problems.append(f"{path.name}: not Google Benchmark JSON (no 'benchmarks' list)")
        return
    runs = []
    for entry in data["benchmarks"]:
        if not isinstance(entry, dict):
            folder.problems.append(f"{path.name}: a benchmark entry is not an object")
            continue
        if entry.get("error_occurred"):
            folder.problems.append(f"{path.name}: {entry.get('name')} failed: {entry.get('error_message', '?')}")
            continue
        try:
            run = parse_benchmark(entry)
        except (KeyError, TypeError, ValueError) as e:
            folder.problems.append(f"{path.name}: entry {entry.get('name', '?')} malformed ({e})")
            continue
        if run is not None:
            runs.append(run)
    if not runs:
        folder.problems.append(f"{path.name}: no benchmark results in it")
    folder.benchmarks[bench] += runs
    folder.contexts[path.stem] = data.get("context", {}) if isinstance(data.get("context"), dict) else {}


def _device_from_context(context: dict) -> dict:
    """The device as benchmark_context.h flattens it: "trainmem.device.<key>" -> value."""
    prefix = "trainmem.device."
    device = {k[len(prefix):]: v for k, v in context.items() if k.startswith(prefix)}
    for key in ("device_memory_bytes", "total_memory_bytes", "sm_count", "cpu_cores"):
        try:
            device[key] = int(device[key])
        except (KeyError, ValueError):
            pass
    return device


def load_folder(path: str | pathlib.Path) -> ResultFolder:
    folder = ResultFolder(path=pathlib.Path(path))
    if not folder.path.is_dir():
        folder.problems.append(f"{folder.path}: not a folder")
        return folder

    info = folder.path / "device.json"
    if info.exists():
        data = _read_json(info, folder.problems)
        if isinstance(data, dict):
            folder.device = data.get("device", {}) or {}
            folder.allocator = data.get("allocator", {}) or {}
    else:
        folder.problems.append("device.json: missing (the device is taken from the benchmarks' context)")

    # bench_zero.json (world size 1) before bench_zero-n2.json, bench_zero-n4.json
    for path in sorted(folder.path.glob("bench_*.json"), key=lambda p: (p.stem.split("-")[0], len(p.stem), p.stem)):
        _load_benchmark_file(path, folder)
    if not folder.device:
        for context in folder.contexts.values():
            folder.device = _device_from_context(context)
            if folder.device:
                break

    for path in sorted(folder.path.glob("train-*.json")):
        data = _read_json(path, folder.problems)
        if isinstance(data, dict) and isinstance(data.get("steps"), list) and isinstance(data.get("memory"), dict):
            folder.train_runs[path.stem[len("train-"):]] = data
        elif data is not None:
            folder.problems.append(f"{path.name}: not a `trainmem train --json` result (no steps/memory)")

    trace = folder.path / "memory-trace.json"
    if trace.exists():
        data = _read_json(trace, folder.problems)
        if isinstance(data, dict) and isinstance(data.get("events"), list):
            folder.trace = data
        elif data is not None:
            folder.problems.append("memory-trace.json: not a recorder trace (no 'events' list)")
    for path in sorted(folder.path.glob("peer-torch-*.json")):
        data = _read_json(path, folder.problems)
        if isinstance(data, dict) and data.get("kind") == "trainmem beside PyTorch" and "pairings" not in data:
            folder.problems.append(f"{path.name}: written by an earlier compare_torch.py (one pairing, no goals): "
                                   "run reports/peers/compare_torch.py again")
        elif isinstance(data, dict) and data.get("kind") == "trainmem beside PyTorch":
            folder.peers[path.stem[len("peer-torch-"):]] = data
        elif data is not None:
            folder.problems.append(f"{path.name}: not a reports/peers/compare_torch.py result")

    snapshot = folder.path / "memory-snapshot.json"
    if snapshot.exists():
        folder.snapshot_path = snapshot
    return folder
