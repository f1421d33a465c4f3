"""Loading one results folder (what ci/suite writes to reports/out/<date>-<device>/).

A folder holds:
  device.json             `trainmem info --json`: the device, the allocator, the build
  run.json                how ci/suite ran: {"command", "quick", "repetitions", "min_time_s"}
  bench_<suite>.json      Google Benchmark JSON, one file per benchmark binary; a binary run at
                          several world sizes (mpirun -np N) adds bench_<suite>-n<N>.json, and
                          the runs of all its files are read as one suite
  train-<name>.json       `trainmem train --json` runs
  memory-trace.json       `trainmem train --record-memory` (the allocator's event log)
  memory-snapshot.json    `trainmem train --memory-snapshot` (PyTorch's snapshot structure)
  peer-torch-<label>.json trainmem beside PyTorch (reports/peers/compare_torch.py); optional
  peer-speed-<label>.json trainmem's CPU step time beside PyTorch's (reports/peers/speed_torch.py); optional

Loading never raises for what is inside the folder: a file that is missing, unreadable (not a
regular file, larger than input_file.MAX_INPUT_BYTES, not JSON) or malformed becomes a line in
`ResultFolder.problems` that names it and says what is wrong, and the report shows what is there.
What is loaded has the types the report expects: the device's fields are plain values (its sizes
and counts numbers), and every time and counter of a benchmark is a finite number (NaN or an
infinity, which Google Benchmark writes as NaN / Infinity, is listed and left out). Only a path
that is not a folder raises, an InputError.
"""
from __future__ import annotations

import math
import pathlib
import re
from dataclasses import dataclass, field

from .errors import InputError
from .input_file import read_json
from .peer_speed import SPEED_KIND

# Google Benchmark's time units, in milliseconds.
_MS_PER_UNIT = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}

# What Google Benchmark appends to a name for Iterations(), UseRealTime(), ...: not part of the
# setting, so dropped ("BM_Zero/small/N2/zero3/offload_none/iterations:5/real_time").
_RUN_OPTIONS = re.compile(r"(/(iterations|repeats|threads|min_time|min_warmup_time):[^/]*|/real_time|/manual_time)+$")

# The aggregates of a case's repetitions the report reads (_one_case). The others are not read, so
# not checked: "mean", and "cv" (stddev / mean), which is NaN for a counter that is 0 in every
# repetition (0 / 0: no variation to measure, not missing data).
_AGGREGATES_READ = {"median", "stddev"}

# Keys of a benchmark entry that are not counters.
_NOT_COUNTERS = {
    "name", "family_index", "per_family_instance_index", "run_name", "run_type", "repetitions",
    "repetition_index", "threads", "iterations", "real_time", "cpu_time", "time_unit", "label",
    "error_occurred", "error_message", "aggregate_name", "aggregate_unit",
}


@dataclass
class Benchmark:
    """One Google Benchmark case: its name, label, wall-clock time per iteration and counters.
    Run with --benchmark_repetitions=N, the time and counters are the median of the N repetitions
    (Google Benchmark's "median" aggregate), `time_stddev_ms` their standard deviation (its
    "stddev" aggregate) and `repetitions` N; a case run once has no spread (None)."""
    name: str
    label: str
    real_time_ms: float
    counters: dict[str, float]
    repetitions: int = 1
    time_stddev_ms: float | None = None
    world_size: int = 1  # the ranks it ran on: its file's context, "trainmem.world_size"

    def counter(self, key: str, default: float | None = None) -> float | None:
        return self.counters.get(key, default)


@dataclass
class ResultFolder:
    path: pathlib.Path
    device: dict = field(default_factory=dict)       # device.json's "device"
    allocator: dict = field(default_factory=dict)    # device.json's "allocator"
    benchmarks: dict[str, list[Benchmark]] = field(default_factory=dict)  # "bench_<name>" -> runs
    bench_files: dict[str, list[pathlib.Path]] = field(default_factory=dict)  # "bench_<name>" -> its files
    contexts: dict[str, dict] = field(default_factory=dict)               # "bench_<name>" -> context
    train_runs: dict[str, dict] = field(default_factory=dict)             # "baseline" -> train JSON
    trace: dict | None = None
    snapshot_path: pathlib.Path | None = None
    peers: dict[str, dict] = field(default_factory=dict)                  # "small-B4-fp32" -> comparison JSON
    peer_speeds: dict[str, dict] = field(default_factory=dict)            # "small-B4" -> speed_torch.py's JSON
    run: dict = field(default_factory=dict)                               # run.json: how ci/suite ran
    # suites.json (the build's catalog, copied by ci/suite): its "benchmarks", in the order they ran,
    # each {"name", "technique" (or None), "folder", ...}; empty for a folder without it
    catalog: list[dict] = field(default_factory=list)
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
    """The file's JSON value, or None with the reason in `problems`."""
    try:
        return read_json(path)
    except InputError as e:
        problems.append(str(e))
        return None


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def finite_number(value: object) -> float | None:
    """`value` as a float if it is a finite number (not a boolean), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        x = float(value)
    except OverflowError:  # an integer beyond a float's range
        return None
    return x if math.isfinite(x) else None


def _not_finite(value: object) -> str:
    """Why finite_number(value) is None, for a number."""
    return "too large for a float" if isinstance(value, int) else f"{value}, not a finite number"


def not_a_number(value: object) -> str:
    """Why `value` is not a finite number, for a problem's line: "null", "a string", "nan, not a finite
    number", "too large for a float"."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _json_type(value)
    return _not_finite(value)


def parse_benchmark(entry: dict, problems: list[str], where: str) -> Benchmark | None:
    """A Google Benchmark entry, or None for aggregates (mean/median of repetitions: see
    parse_entry). A counter that is not a finite number is left out, with a line in `problems`
    (prefixed by `where`); raises ValueError for an entry without a finite time."""
    if entry.get("run_type") == "aggregate":
        return None
    return parse_entry(entry, problems, where)


def run_name(entry: dict) -> str:
    """The case an entry belongs to: a repetition's name (Google Benchmark names every repetition
    of a case alike), an aggregate's run_name ("<case>_median" is named after it)."""
    if entry.get("run_type") == "aggregate":
        return str(entry.get("run_name", entry["name"]))
    return str(entry["name"])


def parse_entry(entry: dict, problems: list[str], where: str) -> Benchmark:
    """A Google Benchmark entry, a repetition or an aggregate, as a Benchmark named by its case."""
    name = _RUN_OPTIONS.sub("", run_name(entry))
    unit = _MS_PER_UNIT.get(entry.get("time_unit", "ns"), 1e-6)
    real_time = finite_number(entry["real_time"])
    if real_time is None:
        raise ValueError(f"real_time is {entry['real_time']!r}" if not isinstance(entry["real_time"], (int, float))
                         else f"real_time is {_not_finite(entry['real_time'])}")
    counters = {}
    for key, value in entry.items():
        if key in _NOT_COUNTERS or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        counters[key] = finite_number(value)
        if counters[key] is None:
            del counters[key]
            problems.append(f"{where}: {name}: {key} is {_not_finite(value)}: left out")
    repeats = entry.get("repetitions", 1)
    repeats = repeats if isinstance(repeats, int) and not isinstance(repeats, bool) and 1 <= repeats <= 1_000_000 else 1
    return Benchmark(name=name, label=str(entry.get("label", "")), real_time_ms=real_time * unit, counters=counters,
                     repetitions=repeats)


def _load_benchmark_file(path: pathlib.Path, folder: ResultFolder) -> None:
    bench = path.stem.split("-", 1)[0]  # bench_<name>-n4 -> bench_<name>
    folder.benchmarks.setdefault(bench, [])  # present, even if nothing in it can be read
    folder.bench_files.setdefault(bench, []).append(path)
    data = _read_json(path, folder.problems)
    if data is None:
        return
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        folder.problems.append(f"{path.name}: not Google Benchmark JSON (no 'benchmarks' list)")
        return
    # case -> its repetitions and its aggregates by name ("median", "stddev", ...), in the order
    # the cases first appear
    repetitions: dict[str, list[Benchmark]] = {}
    aggregates: dict[str, dict[str, Benchmark]] = {}
    for entry in data["benchmarks"]:
        if not isinstance(entry, dict):
            folder.problems.append(f"{path.name}: a benchmark entry is not an object")
            continue
        if entry.get("run_type") == "aggregate" and entry.get("aggregate_name") not in _AGGREGATES_READ:
            continue
        if entry.get("error_occurred"):
            folder.problems.append(f"{path.name}: {entry.get('name')} failed: {entry.get('error_message', '?')}")
            continue
        try:
            run = parse_entry(entry, folder.problems, path.name)
            case = run_name(entry)
        except (KeyError, TypeError) as e:
            folder.problems.append(f"{path.name}: entry {entry.get('name', '?')} malformed ({type(e).__name__}: {e})")
            continue
        except ValueError as e:
            folder.problems.append(f"{path.name}: {entry.get('name', '?')}: {e}: run left out")
            continue
        repetitions.setdefault(case, [])
        if entry.get("run_type") == "aggregate":
            aggregates.setdefault(case, {})[str(entry.get("aggregate_name", ""))] = run
        else:
            repetitions[case].append(run)
    context = data.get("context", {}) if isinstance(data.get("context"), dict) else {}
    world_size = _world_size(context, path.name, folder.problems)
    if world_size is None:
        return
    runs = [r for case in repetitions if (r := _one_case(repetitions[case], aggregates.get(case, {}))) is not None]
    if not runs:
        folder.problems.append(f"{path.name}: no benchmark results in it")
    for run in runs:
        run.world_size = world_size
    folder.benchmarks[bench] += runs
    folder.contexts[path.stem] = context


def _world_size(context: dict, where: str, problems: list[str]) -> int | None:
    """The ranks a file's benchmarks ran on, as the benchmarks under mpirun write it once in their
    context (common/results/ranked_benchmark_main.h): a whole number of at least 1, written as
    text (or as a number). Absent: a benchmark of one process, 1. Anything else: None, and a line
    in `problems` (the file is left out: its figures per rank cannot be put beside the others)."""
    value = context.get("trainmem.world_size", "1")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and int(value) >= 1:
        return int(value)
    problems.append(f"{where}: context trainmem.world_size is {value!r}, not a whole number of at least 1: "
                    "file left out")
    return None


def _one_case(repeated: list[Benchmark], aggregates: dict[str, Benchmark]) -> Benchmark | None:
    """One case from its repetitions and Google Benchmark's aggregates of them: the median's time
    and counters, the stddev's time as the spread. Without aggregates (a case run once), its one
    run; with several repetitions but no aggregates, the first (no spread claimed)."""
    median, stddev = aggregates.get("median"), aggregates.get("stddev")
    if median is None:
        if not repeated:
            return None
        return Benchmark(repeated[0].name, repeated[0].label, repeated[0].real_time_ms, repeated[0].counters)
    return Benchmark(name=median.name, label=median.label, real_time_ms=median.real_time_ms,
                     counters=median.counters, repetitions=max(median.repetitions, len(repeated)),
                     time_stddev_ms=stddev.real_time_ms if stddev is not None else None)


# The device's fields that are numbers (sizes and counts); every other field is shown as text.
_DEVICE_NUMBERS = ("device_memory_bytes", "total_memory_bytes", "sm_count", "cpu_cores")


def _device_fields(fields: dict, where: str, problems: list[str]) -> dict:
    """The device's fields the report can show: plain values, and numbers where a number is meant
    (a number written as text, as a benchmark's context writes it, is read as one). Any other
    field is left out, with a line in `problems` saying which and why."""
    device = {}
    for key, value in fields.items():
        if key in _DEVICE_NUMBERS:
            number = finite_number(value)
            if number is None and isinstance(value, str):
                try:
                    number = finite_number(float(value))
                except ValueError:
                    pass
            if number is None:
                problems.append(f"{where}: device.{key} is {value!r}, not a number: left out")
                continue
            device[key] = int(number) if number.is_integer() else number
        elif isinstance(value, (dict, list)):
            problems.append(f"{where}: device.{key} is {_json_type(value)}, not a plain value: left out")
        else:
            device[key] = value
    return device


def _device_from_context(context: dict, where: str, problems: list[str]) -> dict:
    """The device as benchmark_context.h flattens it: "trainmem.device.<key>" -> value."""
    prefix = "trainmem.device."
    return _device_fields({k[len(prefix):]: v for k, v in context.items() if k.startswith(prefix)}, where, problems)


def _object(data: dict, key: str, where: str, problems: list[str]) -> dict:
    """data[key] if it is an object; {} if absent, and {} with a line in `problems` if it is not one."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(f"{where}: '{key}' is {_json_type(value)}, not an object: left out")
        return {}
    return value


def load_folder(path: str | pathlib.Path) -> ResultFolder:
    """The results in the folder at `path`; raises InputError if it is not a folder."""
    folder = ResultFolder(path=pathlib.Path(path))
    if not folder.path.is_dir():
        raise InputError(f"{folder.path} is not a folder")

    info = folder.path / "device.json"
    if info.exists() or info.is_symlink():
        data = _read_json(info, folder.problems)
        if isinstance(data, dict):
            folder.device = _device_fields(_object(data, "device", info.name, folder.problems), info.name,
                                           folder.problems)
            folder.allocator = _object(data, "allocator", info.name, folder.problems)
        elif data is not None:
            folder.problems.append(f"{info.name}: {_json_type(data)}, not an object: left out")
    else:
        folder.problems.append("device.json: missing (the device is taken from the benchmarks' context)")

    run = folder.path / "run.json"
    if run.exists() or run.is_symlink():
        data = _read_json(run, folder.problems)
        if isinstance(data, dict):
            folder.run = {k: v for k, v in data.items() if isinstance(v, (str, int, float, bool)) or v is None}
        elif data is not None:
            folder.problems.append(f"{run.name}: {_json_type(data)}, not an object: left out")
    else:
        folder.problems.append("run.json: missing (written by ci/suite): whether this was a quick run is not known")

    catalog = folder.path / "suites.json"  # a folder written before the catalog existed has none: no problem
    if catalog.exists() or catalog.is_symlink():
        data = _read_json(catalog, folder.problems)
        entries = data.get("benchmarks") if isinstance(data, dict) else None
        if isinstance(entries, list) and all(isinstance(e, dict) and isinstance(e.get("name"), str) for e in entries):
            folder.catalog = entries
        elif data is not None:
            folder.problems.append(f"{catalog.name}: not the build's catalog (no list of benchmarks): left out")

    # bench_<name>.json (world size 1) before bench_<name>-n2.json, bench_<name>-n4.json
    for path in sorted(folder.path.glob("bench_*.json"), key=lambda p: (p.stem.split("-")[0], len(p.stem), p.stem)):
        _load_benchmark_file(path, folder)
    if not folder.device:
        for stem, context in folder.contexts.items():
            folder.device = _device_from_context(context, f"{stem}.json", folder.problems)
            if folder.device:
                break

    for path in sorted(folder.path.glob("train-*.json")):
        data = _read_json(path, folder.problems)
        if isinstance(data, dict) and isinstance(data.get("steps"), list) and isinstance(data.get("memory"), dict):
            folder.train_runs[path.stem[len("train-"):]] = data
        elif data is not None:
            folder.problems.append(f"{path.name}: not a `trainmem train --json` result (no steps/memory)")

    trace = folder.path / "memory-trace.json"
    if trace.exists() or trace.is_symlink():
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
    for path in sorted(folder.path.glob("peer-speed-*.json")):
        data = _read_json(path, folder.problems)
        if isinstance(data, dict) and data.get("kind") == SPEED_KIND and isinstance(data.get("families"), list):
            folder.peer_speeds[path.stem[len("peer-speed-"):]] = data
        elif data is not None:
            folder.problems.append(f"{path.name}: not a reports/peers/speed_torch.py result")

    snapshot = folder.path / "memory-snapshot.json"
    if snapshot.exists() or snapshot.is_symlink():  # read when the report pickles it
        folder.snapshot_path = snapshot
    return folder
