"""Every benchmark of a results folder has its catalog entry (issue 27, item 11): no suite falls
back to the generic table, and no table shows two rows for the same case."""
from __future__ import annotations

from collections import Counter

from reports.trainmem_report.results import load_folder
from reports.trainmem_report.suites import has_entry, safe_split, suite_for


def test_every_benchmark_in_the_results_has_a_catalog_entry(results):
    folder = load_folder(results)
    assert folder.benchmarks
    missing = [bench for bench in folder.benchmarks if not has_entry(bench)]
    assert not missing, f"not in reports/trainmem_report/suites.py: {missing}"


def test_no_suite_table_has_two_rows_for_one_group_and_setting(results):
    folder = load_folder(results)
    for bench, runs in folder.benchmarks.items():
        suite = suite_for(bench)
        counts = Counter(safe_split(suite, b) for b in runs)
        twice = [key for key, n in counts.items() if n > 1]
        assert not twice, f"{bench}: rows that cannot be told apart: {twice}"


def test_the_build_catalog_orders_the_suites_and_brings_a_new_technique(fixture_copy):
    """suites.json (the build's catalog, copied by ci/suite): its order is the report's, and a
    technique the report has no presentation for is shown, titled after it and naming its README."""
    import json
    import shutil as sh

    from conftest import md_text
    from reports.trainmem_report.__main__ import main

    sh.copy(fixture_copy / "bench_accumulation.json", fixture_copy / "bench_newtech.json")
    catalog = {"techniques": [{"name": "newtech", "folder": "suites/newtech"}],
               "benchmarks": [{"name": "bench_newtech", "technique": "newtech", "folder": "suites/newtech"},
                              {"name": "bench_zero", "technique": "zero", "folder": "suites/zero"},
                              {"name": "bench_baseline", "technique": None, "folder": "common"}]}
    (fixture_copy / "suites.json").write_text(json.dumps(catalog))
    assert main(["render", str(fixture_copy)]) == 0
    summary = md_text((fixture_copy / "summary.md").read_text())
    new, zero, base = (summary.index(f"## {t}") for t in ("newtech (bench_newtech)", "ZeRO (bench_zero)",
                                                           "Baseline training step (bench_baseline)"))
    assert new < zero < base, "the catalog's order"
    assert "suites/newtech/README.md" in summary
    assert "not in the report's catalog" not in summary.split("## newtech (bench_newtech)", 1)[1].split("\n## ", 1)[0]
    # the suites the catalog leaves out are still shown, after it
    assert summary.index("## Gradient accumulation (bench_accumulation)") > base
