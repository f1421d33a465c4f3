"""The top README's table of techniques lists the techniques the build declares, in their order.

A technique is declared once, by its manifest (suites/<name>/CMakeLists.txt, trainmem_add_technique);
the build writes the catalog $TRAINMEM_BUILD_DIR/suites.json from the manifests. A README cannot be
generated at build time, so this test holds its table to the catalog: one row per technique, each
linking the technique's README, in the catalog's order (the progress line's). A new suite without
its row, or a row left behind by a removed one, fails here.
"""
from __future__ import annotations

import json
import os
import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
README = REPO / "README.md"
# A row of the table: | [name](suites/name/README.md) | technique | flags |
ROW = re.compile(r"^\| \[([a-z_]+)\]\((suites/[a-z_]+/README\.md)\) \|")


def catalog_techniques() -> list[dict]:
    build = os.environ.get("TRAINMEM_BUILD_DIR")
    if not build:
        pytest.skip("TRAINMEM_BUILD_DIR not set: no catalog (ci/test sets it)")
    catalog = pathlib.Path(build) / "suites.json"
    if not catalog.is_file():
        pytest.skip(f"{catalog} is missing: configure the build")
    return json.loads(catalog.read_text())["techniques"]


def readme_rows() -> list[tuple[str, str]]:
    lines = README.read_text().splitlines()
    start = lines.index("## The techniques")
    rows = []
    for line in lines[start:]:
        if line.startswith("## ") and rows:
            break
        match = ROW.match(line)
        if match:
            rows.append((match.group(1), match.group(2)))
    return rows


def test_the_table_lists_every_declared_technique_in_order():
    techniques = catalog_techniques()
    assert techniques, "the catalog lists no technique"
    assert readme_rows() == [(t["name"], t["readme"]) for t in techniques]


def test_every_linked_readme_exists():
    for name, readme in readme_rows():
        assert (REPO / readme).is_file(), f"{name}: {readme} does not exist"
