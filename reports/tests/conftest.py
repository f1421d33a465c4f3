"""Result folders for the renderer's tests.

Two sources of real results, both produced by `ci/suite --quick` (real binaries, short cases):
  fixture  reports/tests/fixtures/cpu-quick/, committed (CPU, CI machine); always there
  live     made now, when TRAINMEM_BUILD_DIR names a build folder (ci/test sets it): the tests
           then also check the results of the binaries just built; skipped otherwise, saying why
"""
from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys

import pytest

try:  # the fuzz tests' settings (test_fuzz_loader.py); hypothesis is installed by ci/setup
    from hypothesis import HealthCheck, settings
except ImportError:  # the fuzz tests skip themselves, saying why
    pass
else:
    # ci (the default): a fixed number of examples drawn the same way every run, a few seconds.
    # long: many more, drawn anew each run (README: `--hypothesis-profile=long`).
    settings.register_profile("ci", max_examples=150, derandomize=True, deadline=None, database=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("long", max_examples=20_000, deadline=None, database=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("ci")

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # `reports.trainmem_report`, as `python3 -m` finds it from the root
FIXTURE = REPO / "reports" / "tests" / "fixtures" / "cpu-quick"


class Hangs(BaseException):
    """Raised by time_limit. Not an Exception (nor an OSError, as TimeoutError is), so that no
    `except Exception` or `except OSError` of the code under test can swallow it."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Fails the test with Hangs after `seconds` (SIGALRM), where the code under test would hang:
    a blocking open() or read() is interrupted, so a hang becomes a failure."""
    def expire(signum, frame):
        raise Hangs(f"still running after {seconds} s: it hangs")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="session")
def live_results(tmp_path_factory) -> pathlib.Path:
    build = os.environ.get("TRAINMEM_BUILD_DIR")
    if not build:
        pytest.skip("TRAINMEM_BUILD_DIR not set: no live ci/suite --quick run (ci/test sets it)")
    out = tmp_path_factory.mktemp("live") / "cpu-quick"
    run = subprocess.run([str(REPO / "ci" / "suite"), "--quick", "--build", build, "--out", str(out)],
                         cwd=REPO, capture_output=True, text=True, env={**os.environ, "TRAINMEM_DEVICE": "cpu"})
    assert run.returncode == 0, f"ci/suite --quick failed:\n{run.stdout}\n{run.stderr}"
    return out


@pytest.fixture(scope="session", params=["fixture", "live"])
def results(request, tmp_path_factory) -> pathlib.Path:
    """A fresh copy of a real results folder (the tests render into it)."""
    source = FIXTURE if request.param == "fixture" else request.getfixturevalue("live_results")
    copy = tmp_path_factory.mktemp(request.param) / source.name
    shutil.copytree(source, copy)
    return copy


@pytest.fixture
def fixture_copy(tmp_path) -> pathlib.Path:
    """A private copy of the committed fixture, to damage."""
    copy = tmp_path / "results"
    shutil.copytree(FIXTURE, copy)
    for generated in ("index.html", "summary.md", "plots"):
        target = copy / generated
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    return copy


def cases(entries: list[dict]) -> list[dict]:
    """One entry per benchmark case, as the report shows it: its "median" aggregate when it was
    repeated (ci/suite repeats every case), else its one entry; in the order the cases ran."""
    medians = {e["run_name"]: e for e in entries if e.get("aggregate_name") == "median"}
    out, seen = [], set()
    for e in entries:
        case = e.get("run_name", e["name"])
        if e.get("run_type") == "aggregate" or case in seen:
            continue
        seen.add(case)
        out.append(medians.get(case, e))
    return out


def md_text(markdown: str) -> str:
    """summary.md's text as it reads: Markdown's backslash escapes (markdown.escape) removed."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)


def section_tables(summary: str, section: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every table of one section of summary.md (`## <section>`), in order: (header, rows of cells)."""
    text = summary.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    out: list[tuple[list[str], list[list[str]]]] = []
    in_table = False
    for line in text.splitlines():
        if line.startswith("|---"):
            continue
        if line.startswith("| "):
            cells = [md_text(c.strip()) for c in line.strip("|").split(" | ")]
            if in_table:
                out[-1][1].append(cells)
            else:
                out.append((cells, []))
            in_table = True
        else:
            in_table = False
    return out
