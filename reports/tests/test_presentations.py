"""A suite is declared once, in its folder (issue 28): its presentation is <folder>/<benchmark>_report.py,
beside the manifest line that declares the benchmark (reports/trainmem_report/suites.py finds it), and
nothing in reports/trainmem_report names a particular suite."""
from __future__ import annotations

import ast
import json
import os
import pathlib
import re

import pytest

from conftest import FIXTURE, REPO
from reports.trainmem_report.suites import SUFFIX, presentation_modules, presentations

PACKAGE = REPO / "reports" / "trainmem_report"


def test_each_suite_has_one_presentation_file():
    suites = presentations()
    assert suites, "no presentation file found in the repository's CMake folders"
    for field in ("key", "bench", "order"):
        values = [getattr(s, field) for s in suites]
        assert len(values) == len(set(values)), f"two presentations with the same {field}: {sorted(values)}"
    for path, module in presentation_modules().items():
        assert (REPO / path).parent.joinpath("CMakeLists.txt").is_file(), f"{path}: not beside a manifest"
        assert path.endswith(f"/{module.SUITE.bench}{SUFFIX}"), path


def test_nothing_in_the_report_package_names_a_suite():
    """A benchmark's name (bench_zero) is unmistakable: it may not appear anywhere, comments included.
    A suite's key is a word ("zero", "allocator") that prose may use, so it is looked for as a string of
    the code (a lookup, a comparison, a dict key); a key that is also a field of the results' own
    device.json ("allocator": the device's allocator configuration) or of a configuration in a
    `trainmem plan --json` document ("accumulation": micro-batches per step, plan.py) is that field there."""
    fields = set(json.loads((FIXTURE / "device.json").read_text()))
    plan = json.loads((FIXTURE.parent / "plan_small.json").read_text())
    fields |= {key for configuration in plan["candidates"] + plan["not_fitting"] for key in configuration}
    found = []
    for path in sorted(PACKAGE.glob("*.py")):
        text = path.read_text()
        strings = {node.value for node in ast.walk(ast.parse(text))
                   if isinstance(node, ast.Constant) and isinstance(node.value, str)}
        for s in presentations():
            # bench_x anywhere: bench_x.json, bench_x-n2, bench_x_report (not bench_xy)
            if re.search(rf"(?<!\w){re.escape(s.bench)}(?![A-Za-z0-9])", text):
                found.append(f"{path.name}: {s.bench}")
            if s.key in strings and s.key not in fields:
                found.append(f"{path.name}: {s.key!r}")
    assert not found, ("reports/trainmem_report names suites; what is a suite's own belongs in its "
                       f"presentation file (<folder>/<benchmark>{SUFFIX}): {found}")


def test_every_benchmark_of_the_build_has_its_presentation_in_its_folder():
    """The build's catalog (suites.json) names each benchmark's folder: its presentation file is there."""
    build = os.environ.get("TRAINMEM_BUILD_DIR")
    if not build:
        pytest.skip("TRAINMEM_BUILD_DIR not set: no catalog (ci/test sets it)")
    catalog = pathlib.Path(build) / "suites.json"
    if not catalog.is_file():
        pytest.skip(f"{catalog} is missing: configure the build")
    missing = [f"{b['folder']}/{b['name']}{SUFFIX}" for b in json.loads(catalog.read_text())["benchmarks"]
               if f"{b['folder']}/{b['name']}{SUFFIX}" not in presentation_modules()]
    assert not missing, f"benchmarks of the build without their presentation file: {missing}"
