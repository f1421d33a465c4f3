"""One result schema (issue 28, item 6): the keys common/results/result_schema.json declares are
the keys the C++ side writes (it is generated from the file) and the keys the report reads (it
loads the file: reports/trainmem_report/result_schema.py). Checked on real results: the committed
fixture and, with TRAINMEM_BUILD_DIR, a fresh `ci/suite --quick` run."""
from __future__ import annotations

import json
import pathlib
import re

from reports.trainmem_report import result_schema as schema
from reports.trainmem_report import suites

REPORT = pathlib.Path(schema.__file__).parent


def test_the_schema_names_each_key_once():
    assert len(set(schema.CATEGORIES)) == len(schema.CATEGORIES) > 0
    assert len(set(schema.STEP_FIELDS)) == len(schema.STEP_FIELDS) > 0
    keys = [schema.PEAK_ALLOCATED, schema.PEAK_RESERVED, schema.ALLOCATED, schema.RESERVED]
    assert len(set(keys)) == len(keys)
    assert all(schema.CATEGORY_HOLDS[c] for c in schema.CATEGORIES)


def test_train_results_carry_exactly_the_schemas_memory_and_step_keys(results):
    runs = sorted(results.glob("train-*.json"))
    assert runs, f"no train-*.json in {results}"
    for path in runs:
        run = json.loads(path.read_text())
        memory = run["memory"]
        for key in (schema.PEAK_ALLOCATED, schema.PEAK_RESERVED, schema.ALLOCATED, schema.RESERVED):
            assert isinstance(memory.get(key), int), f"{path.name}: memory.{key}"
        assert list(memory[schema.BY_CATEGORY]) == sorted(schema.CATEGORIES), path.name  # JSON objects are sorted
        for category, figures in memory[schema.BY_CATEGORY].items():
            assert set(figures) == {schema.CATEGORY_CURRENT, schema.CATEGORY_PEAK}, f"{path.name}: {category}"
        for step in run["steps"]:
            assert set(step) == set(schema.STEP_FIELDS), f"{path.name}: step {step.get('step')}"


def test_benchmark_memory_counters_are_the_schemas(results):
    """Every benchmark that reports memory reports peak allocated and peak reserved under the
    schema's keys, and its categories' peaks as schema.category_peak_counter names them."""
    with_memory, category_peaks = 0, 0
    for path in sorted(results.glob("bench_*.json")):
        for entry in json.loads(path.read_text())["benchmarks"]:
            if entry.get("run_type", "iteration") != "iteration":
                continue  # an aggregate (a standard deviation can be 0)
            if schema.PEAK_ALLOCATED in entry:
                with_memory += 1
                assert schema.PEAK_RESERVED in entry, f"{path.name}: {entry['name']}"
            for category in schema.CATEGORIES:
                value = entry.get(schema.category_peak_counter(category))
                if value is not None:
                    assert value >= 0, f"{path.name}: {entry['name']}: {category}"
                    category_peaks += 1
    assert with_memory > 0 and category_peaks > 0


def test_the_report_spells_no_key_of_the_schema_itself():
    """The report's code and the suites' presentations (<folder>/bench_<name>_report.py) read the
    keys from result_schema.py, not as literals of their own: no peak key, no
    "<category>_peak_bytes", no list of all the categories (a suite's own subset is its own fact)."""
    keys = [schema.PEAK_ALLOCATED, schema.PEAK_RESERVED] + [schema.category_peak_counter(c) for c in schema.CATEGORIES]
    literal = re.compile(r"""["'](%s)["']""" % "|".join(re.escape(k) for k in keys))
    category_list = re.compile(r"\s*,\s*".join(r"""["']%s["']""" % c for c in schema.CATEGORIES))
    files = [p for p in sorted(REPORT.glob("*.py")) if p.name != "result_schema.py"]
    files += [pathlib.Path(m.__file__) for m in suites.presentation_modules().values()]
    assert len(files) > len(list(REPORT.glob("*.py")))  # the presentations were found
    offenders = []
    for path in files:
        text = path.read_text()
        offenders += [f"{path.name}: {m.group(0)}" for m in literal.finditer(text)]
        offenders += [f"{path.name}: a list of categories" for _ in category_list.finditer(text)]
    assert not offenders, offenders
