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
