"""ci/gpu-bench-chunks: benchmarks run in chunks keep what they measured.

A stand-in for a Google Benchmark binary (a Python script) lists five cases, writes a JSON file
for the cases its --benchmark_filter selects, and when the environment asks it to hangs on the
case named "hang" (FAKE_HANG), reports an error for the case named "error" (FAKE_ERROR) or fails
every run (FAKE_FAIL).
"""
import json
import os
import pathlib
import re
import stat
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "gpu-bench-chunks"

FAKE_BENCH = r'''#!/usr/bin/env python3
import json, os, re, sys, time
cases = ["a/T:1", "b(x)+y.z", "hang", "error", "e/T:2"]
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
pattern = args.get("--benchmark_filter", ".*")
# Google Benchmark's filters are POSIX extended expressions; Python's re reads these ones alike.
chosen = [c for c in cases if re.search(pattern, c)]
if args.get("--benchmark_list_tests") == "true":
    print("\n".join(chosen))
    sys.exit(0)
if os.environ.get("FAKE_HANG") and "hang" in chosen:
    time.sleep(60)
if os.environ.get("FAKE_FAIL"):  # e.g. no usable GPU: exit 2 before any result
    sys.exit(2)
results = [{"name": c, "run_name": c, "real_time": 1.0} for c in chosen]
for r in results:
    if os.environ.get("FAKE_ERROR") and r["name"] == "error":
        r.update(error_occurred=True, error_message="out of memory")
with open(args["--benchmark_out"], "w") as f:
    json.dump({"context": {"device": args["--device"]}, "benchmarks": results}, f)
'''


@pytest.fixture
def bench(tmp_path):
    path = tmp_path / "bench_fake"
    path.write_text(FAKE_BENCH)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def run(tmp_path, bench, *extra, env=None):
    merged, status = tmp_path / "benchmarks.json", tmp_path / "status.tsv"
    cmd = [sys.executable, str(SCRIPT), "--device", "cuda", "--results", str(tmp_path / "r"),
           "--merged", str(merged), "--status", str(status), "--log", str(tmp_path / "log"),
           "--chunk", "2", "--timeout", "6", *extra, "--", str(bench)]
    done = subprocess.run(cmd, env={**os.environ, **(env or {})}, timeout=60)
    statuses = dict(line.split("\t") for line in status.read_text().splitlines())
    return done.returncode, json.loads(merged.read_text())["bench_fake"], statuses["bench_fake"]


def names(entry):
    return [b["name"] for b in entry["benchmarks"]]


def test_every_case_is_measured_once_in_order_and_names_need_no_care(tmp_path, bench):
    code, entry, status = run(tmp_path, bench)
    assert (code, status) == (0, "ok")
    assert names(entry) == ["a/T:1", "b(x)+y.z", "hang", "error", "e/T:2"]
    assert entry["context"] == {"device": "cuda"}


def test_a_chunk_that_times_out_loses_only_its_own_cases(tmp_path, bench):
    code, entry, status = run(tmp_path, bench, env={"FAKE_HANG": "1"})
    assert code == 1
    assert names(entry) == ["a/T:1", "b(x)+y.z", "e/T:2"]  # before and after the hanging chunk
    assert entry["unmeasured"] == ["hang", "error"]
    assert status == "failed: chunk 1 timed out (2 cases); 2 of 5 case(s) not measured"


def test_a_case_reporting_an_error_fails_its_binary(tmp_path, bench):
    code, entry, status = run(tmp_path, bench, env={"FAKE_ERROR": "1"})
    assert code == 1
    assert entry["errors"] == ["error: out of memory"]
    assert status.startswith("failed: 1 case(s) reported an error")


def test_excluded_cases_are_listed_not_run(tmp_path, bench):
    code, entry, status = run(tmp_path, bench, "--exclude", "^(hang|error)$", env={"FAKE_HANG": "1"})
    assert (code, status) == (0, "ok")
    assert names(entry) == ["a/T:1", "b(x)+y.z", "e/T:2"]
    assert entry["excluded"] == ["hang", "error"]


def test_a_spent_budget_leaves_the_rest_unmeasured_and_failed(tmp_path, bench):
    code, entry, status = run(tmp_path, bench, "--budget", "3")
    assert code == 1
    assert names(entry) == []
    assert status == ("failed: chunk 0 not run (time budget) (2 cases); chunk 1 not run (time budget) (2 cases); "
                      "chunk 2 not run (time budget) (1 cases); 5 of 5 case(s) not measured")


def test_the_exact_filter_selects_each_name_alone():
    spec = {"__name__": "gpu_bench_chunks"}
    exec(compile(SCRIPT.read_text(), str(SCRIPT), "exec"), spec)
    names_ = ["attention/flash_v3_bf16/fwd/T:512/D:64/causal:0/manual_time", "b(x)+y.z", "a|b", "^$*?[]{}\\"]
    for n in names_:
        pattern = spec["exact_filter"]([n])
        assert [m for m in names_ + [n + "x", "x" + n] if re.search(pattern, m)] == [n]


def test_a_selection_runs_only_its_cases(tmp_path, bench):
    code, entry, status = run_entry(tmp_path, f"{bench}=T:")
    assert (code, status) == (0, "ok")
    assert names(entry) == ["a/T:1", "e/T:2"]


def test_a_selection_may_leave_cases_out_by_a_lookahead(tmp_path, bench):
    # The sweep step: everything but what the slice ran (ci/gpu-check).
    code, entry, status = run_entry(tmp_path, f"{bench}=^(?!(hang|error|a/))")
    assert (code, status) == (0, "ok")
    assert names(entry) == ["b(x)+y.z", "e/T:2"]


def test_a_selection_that_finds_nothing_fails_saying_so(tmp_path, bench):
    code, entry, status = run_entry(tmp_path, f"{bench}=^nothing$")
    assert code == 1
    assert status == "failed: no case to run (selection '^nothing$')"


def test_a_second_step_adds_to_the_merged_file(tmp_path, bench):
    # slice, then sweep in the same call: benchmarks.json keeps both steps' cases, in order.
    run_entry(tmp_path, f"{bench}=^a/")
    code, entry, status = run_entry(tmp_path, f"{bench}=^e/")
    assert (code, status) == (0, "ok")
    assert names(entry) == ["a/T:1", "e/T:2"]


def run_entry(tmp_path, entry):
    merged, status = tmp_path / "benchmarks.json", tmp_path / "status.tsv"
    cmd = [sys.executable, str(SCRIPT), "--device", "cuda", "--results", str(tmp_path / "r"),
           "--merged", str(merged), "--status", str(status), "--log", str(tmp_path / "log"),
           "--chunk", "2", "--timeout", "6", "--", entry]
    done = subprocess.run(cmd, timeout=60)
    statuses = dict(line.split("\t") for line in status.read_text().splitlines())
    return done.returncode, json.loads(merged.read_text())["bench_fake"], statuses["bench_fake"]


def test_a_binary_failing_every_chunk_is_said_in_one_short_line(tmp_path, bench):
    # Every chunk fails: three named, the rest counted (the line ends up in the call's output tail).
    code, entry, status = run(tmp_path, bench, "--chunk", "1", env={"FAKE_FAIL": "1"})
    assert code == 1
    assert status.count("exit 2") == 3 and "2 more chunk(s) failed" in status
    assert status.endswith("5 of 5 case(s) not measured")
