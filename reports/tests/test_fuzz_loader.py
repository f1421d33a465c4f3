"""Fuzzing the renderer's loader (issue 25, item 7): results folders made of random and mutated
files (JSON of any shape, the fixture's files with a value changed or dropped, truncated text,
random bytes, huge integers, NaN and infinities), non-regular files (FIFOs, folders, a link to
/dev/zero, dangling links) and odd names. The loader must load the folder, with what it loaded of
the types the report expects, or raise the renderer's own error (ReportError); never another
exception, never hang. The whole render, on fewer folders, likewise.

In ci/test: a fixed set of examples (hypothesis profile "ci", derandomized: the same every run), a
few seconds. Longer, with examples drawn anew each run (README, "Layout and tests"):
  python3 -m pytest -p no:cacheprovider reports/tests/test_fuzz_loader.py --hypothesis-profile=long
"""
from __future__ import annotations

import json
import os
import pathlib
import tempfile

import pytest

from conftest import FIXTURE, time_limit
from reports.trainmem_report import html, markdown, report
from reports.trainmem_report.errors import ReportError
from reports.trainmem_report.results import ResultFolder, load_folder

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed (ci/setup installs it)")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

# Keys the loader and the report look for, so that random objects often have the right names.
KEYS = ["device", "allocator", "config", "kind", "name", "cpu_model", "device_memory_bytes", "total_memory_bytes",
        "cpu_cores", "benchmarks", "context", "load_avg", "num_cpus", "run_type", "real_time", "time_unit",
        "label", "error_occurred", "error_message", "peak_allocated_bytes", "trainmem.world_size", "stage", "steps",
        "loss", "step", "memory", "by_category", "events", "phases", "action", "addr", "size", "block_size",
        "category", "phase", "segments", "device_traces", "blocks", "pairings", "goals"]
NAMES = ["device.json", "bench_baseline.json", "bench_zero.json", "bench_zero-n2.json", "bench_checkpointing.json",
         "bench_allocator.json", "bench_unknown.json", "train-baseline.json", "train-precision-fp16.json",
         "train-attention-flash-T64.json", "memory-trace.json", "memory-snapshot.json", "peer-torch-x.json"]
FIXTURE_FILES = sorted(p.name for p in FIXTURE.glob("*.json"))

numbers = st.one_of(st.integers(), st.integers(min_value=10**300, max_value=10**400),
                    st.floats(allow_nan=True, allow_infinity=True))
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=12), st.sampled_from(KEYS))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), inner,
                                                 max_size=5)), max_leaves=20)


@st.composite
def mutated(draw, value, depth: int = 0):
    """`value` with one value somewhere in it replaced by a random one, or one key dropped."""
    if isinstance(value, (dict, list)) and value and depth < 8 and draw(st.integers(0, 3)) > 0:
        key = draw(st.sampled_from(sorted(value) if isinstance(value, dict) else range(len(value))))
        copy = value.copy()
        if isinstance(value, dict) and draw(st.integers(0, 4)) == 0:
            del copy[key]
        else:
            copy[key] = draw(mutated(value[key], depth + 1))
        return copy
    return draw(st.one_of(numbers, json_values))


FIXTURE_JSON: dict[str, object] = {}


def fixture_json(name: str):
    if name not in FIXTURE_JSON:
        FIXTURE_JSON[name] = json.loads((FIXTURE / name).read_text())
    return FIXTURE_JSON[name]


@st.composite
def contents(draw, like: str) -> bytes:
    """A file's bytes: the fixture file `like` with a few values changed or dropped, or truncated;
    random JSON; or random bytes."""
    kind = draw(st.sampled_from(["mutated"] * 3 + ["truncated", "json", "bytes"]))
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind == "truncated":
        text = (FIXTURE / like).read_bytes()
        return text[:draw(st.integers(0, len(text)))]
    value = fixture_json(like)
    for _ in range(draw(st.integers(1, 3))):
        value = draw(mutated(value))
    return json.dumps(value).encode()


odd_names = st.builds(lambda prefix, middle: f"{prefix}{middle}.json",
                      st.sampled_from(["bench_", "train-", "peer-torch-", ""]),
                      st.text(st.characters(blacklist_characters="/\0", blacklist_categories=["Cs"]), max_size=20))


@st.composite
def files(draw) -> tuple[str, str, bytes]:
    """(name, what it is, its bytes if a file): a fixture's name most often, with that file's content mutated."""
    name = draw(st.one_of(st.sampled_from(NAMES), odd_names))
    kind = draw(st.sampled_from(["file"] * 6 + ["fifo", "folder", "dev-zero", "dangling", "link"]))
    like = name if name in FIXTURE_FILES else draw(st.sampled_from(FIXTURE_FILES))
    return name, kind, draw(contents(like))


def make_folder(folder: pathlib.Path, spec: list[tuple[str, str, bytes]]) -> None:
    for name, kind, data in spec:
        path = folder / name
        if len(name.encode()) > 255 or path.exists() or path.is_symlink():
            continue
        if kind == "file":
            path.write_bytes(data)
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "folder":
            path.mkdir()
        elif kind == "dev-zero":
            path.symlink_to("/dev/zero")
        elif kind == "dangling":
            path.symlink_to(folder / "nowhere")
        else:  # a link to a regular file
            (folder / f".target-{len(name)}").write_bytes(data)
            path.symlink_to(folder / f".target-{len(name)}")


def is_finite(x) -> bool:
    return isinstance(x, float) and x - x == 0  # NaN and infinities give NaN


def check_types(loaded: ResultFolder) -> None:
    """What the loader promises the report (results.py's docstring)."""
    assert all(isinstance(p, str) for p in loaded.problems)
    assert isinstance(loaded.device, dict) and isinstance(loaded.allocator, dict)
    assert all(not isinstance(v, (dict, list)) for v in loaded.device.values())
    for key in ("device_memory_bytes", "total_memory_bytes", "sm_count", "cpu_cores"):
        assert key not in loaded.device or isinstance(loaded.device[key], (int, float))
    for runs in loaded.benchmarks.values():
        for b in runs:
            assert isinstance(b.name, str) and is_finite(b.real_time_ms)
            assert all(is_finite(v) for v in b.counters.values())
    for run in loaded.train_runs.values():
        assert isinstance(run["steps"], list) and isinstance(run["memory"], dict)
    assert loaded.trace is None or isinstance(loaded.trace["events"], list)


@given(st.lists(files(), max_size=6))
def test_the_loader_loads_or_says_what_is_wrong(spec):
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp) / "results"
        folder.mkdir()
        make_folder(folder, spec)
        with time_limit(30):
            try:
                loaded = load_folder(folder)
            except ReportError:
                return
        check_types(loaded)


@settings(max_examples=max(5, settings.default.max_examples // 15))  # each draws plots: about 0.5 s
@given(st.lists(files(), min_size=1, max_size=4))
def test_the_whole_render_gives_a_report_or_says_what_is_wrong(spec):
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp) / "results"
        folder.mkdir()
        make_folder(folder, spec)
        with time_limit(60):
            try:
                doc = report.build(load_folder(folder), folder)
                html.write(doc, folder / "index.html")
                markdown.write(doc, folder / "summary.md")
            except ReportError:
                return
        assert (folder / "index.html").is_file() and (folder / "summary.md").is_file()
