"""Which suites there are, where each one's presentation is declared, and in what order the report
shows them.

A suite declares its presentation in its own folder, beside the CMakeLists.txt whose manifest line
declares its benchmark: `<folder>/<benchmark>_report.py` (a technique's: suites/<name>/bench_<name>_report.py;
the catalog's "folder" is that folder), defining `SUITE = Suite(...)` (presentation.py). Nothing in
reports/ names a suite (reports/tests/test_presentations.py keeps it so): adding a suite is its
folder and its manifest line.

The build's catalog (build/<preset>/suites.json, made from the manifests; ci/suite copies it into the
results folder) gives each benchmark's folder and the order they ran in: `suites_of(folder)`. A
benchmark of the catalog without a presentation file gets the generic one, titled after its technique
and pointing to its README; so does a file of the folder the catalog lacks, with a line saying so. A
folder without suites.json (written before the catalog existed) is shown in the presentations' own
order (Suite.order). Every benchmark binary of this build has a presentation
(reports/tests/test_catalog.py checks it on every results folder).

Only files in the repository's CMake folders are loaded: a catalog's "folder" picks one of them and is
never opened as a path, so rendering a results folder runs no code that came with it.
"""
from __future__ import annotations

import functools
import importlib.util
import pathlib
import posixpath
import sys
from types import ModuleType

from .presentation import Suite, safe_split  # noqa: F401 - safe_split: report.py and the tests take it from here

REPO = pathlib.Path(__file__).resolve().parents[2]  # reports/trainmem_report/suites.py -> the repository root
SUFFIX = "_report.py"                               # bench_<name> -> bench_<name>_report.py


def _cmake_folders() -> list[pathlib.Path]:
    """The repository's CMake folders: the root and every folder below it that has a CMakeLists.txt,
    as has each folder above it (where a manifest line can declare a benchmark). build/ and the
    results folders have none, so they are never looked into."""
    found, todo = [], [REPO]
    while todo:
        folder = todo.pop()
        found.append(folder)
        todo += [p for p in folder.iterdir() if p.is_dir() and (p / "CMakeLists.txt").is_file()]
    return found


def _load(path: pathlib.Path) -> ModuleType:
    """One presentation file, run as a module; it must define SUITE for the benchmark it is named after."""
    bench = path.name[:-len(SUFFIX)]
    spec = importlib.util.spec_from_file_location(f"trainmem_presentations.{bench}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    suite = getattr(module, "SUITE", None)
    if not isinstance(suite, Suite) or suite.bench != bench:
        raise TypeError(f"{path.relative_to(REPO)}: must define SUITE = Suite(...) with bench {bench!r}")
    return module


@functools.cache
def presentation_modules() -> dict[str, ModuleType]:
    """Every presentation file of the repository, loaded once: its path in the repository -> its module.
    Loaded on first use, not at import: a presentation file imports this package's modules."""
    files = sorted(p for folder in _cmake_folders() for p in folder.glob(f"*{SUFFIX}"))
    return {p.relative_to(REPO).as_posix(): _load(p) for p in files}


def presentations() -> list[Suite]:
    """Every suite that has a presentation file, in their own order (Suite.order)."""
    return sorted((m.SUITE for m in presentation_modules().values()), key=lambda s: s.order)


def __getattr__(name: str):
    # `suites.SUITES`: every presentation, as presentations() gives them (found on first use).
    if name == "SUITES":
        return presentations()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def catalog_suite(entry: dict) -> Suite:
    """The suite of one entry of the build's catalog: the presentation file in the entry's folder,
    or the generic one."""
    bench, folder = entry["name"], entry.get("folder")
    if isinstance(folder, str):
        module = presentation_modules().get(posixpath.normpath(f"{folder}/{bench}{SUFFIX}"))
        if module is not None:
            return module.SUITE
    technique = entry.get("technique") if isinstance(entry.get("technique"), str) else None
    readme = f"{folder}/README.md" if isinstance(folder, str) else "its folder"
    what = (f"the technique {technique}'s benchmark" if technique else "a benchmark of the build") + \
        f" (generic table: the report has no presentation of its own for it; see {readme})"
    return Suite(technique or bench, technique or bench, bench, what)


def suites_of(folder) -> list[Suite]:
    """The suites of a results folder, in the order they ran: its catalog's (suites.json), else
    presentations()'."""
    if not folder.catalog:
        return presentations()
    return [catalog_suite(entry) for entry in folder.catalog]


def has_entry(bench: str) -> bool:
    """Whether the benchmark file `bench` has a presentation (not the generic fallback)."""
    return any(s.bench == bench for s in presentations())


def suite_for(bench: str) -> Suite:
    """The presentation of a benchmark file, or a generic one for a file no suite presents."""
    for s in presentations():
        if s.bench == bench:
            return s
    return Suite(bench, bench, bench, "(not in the report's catalog: generic table)")
