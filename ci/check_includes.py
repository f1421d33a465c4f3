#!/usr/bin/env python3
"""Dependencies point one way (DESIGN.md): fails on an #include that breaks the direction.

    kernels/         includes nothing from common/ or suites/
    common/          includes nothing from suites/
    suites/<X>/      includes nothing from another suite's folder suites/<Y>/
    suites/trainmem/ (the driver) includes no suite either: it reaches them through their
                     registrations, whose list the build generates from the manifests
                     (build/<preset>/generated/registered_techniques.cpp, not scanned here)

Project includes are the quoted ones, rooted at the repository ("common/train/technique.h").
KNOWN lists the includes that break the rule and are still to be removed (each with why; none
today); it may only shrink: an entry that no longer matches an include fails the check too, so
that it is taken out when its include goes.

    ci/check_includes.py [ROOT]     # check the tree at ROOT (default: this repository)
    ci/check_includes.py --self-test

ctest runs both (check_includes, check_includes_self_test: CMakeLists.txt).
"""
from __future__ import annotations

import pathlib
import re
import sys
import tempfile

SOURCES = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh"}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)

# (file, included file): includes across the layers still to be removed, each with why. None
# today: the tests that mix techniques are the driver's (suites/trainmem/tests: flags read by
# train's parser, the registered techniques, the sharding strategy through
# common/train/data_parallel_strategy.h, the formulas through Techniques::formulas), and a suite's
# own test runs its technique alone. An entry added here is a debt, and the check fails once its
# include is gone, so that the entry goes with it.
KNOWN: set[tuple[str, str]] = set()


def violation(source: str, included: str) -> str | None:
    """Why `source` may not include `included` (both relative to the root), or None."""
    layer, inc_layer = source.split("/")[0], included.split("/")[0]
    if layer == "kernels" and inc_layer in ("common", "suites"):
        return "kernels/ depends on nothing of the project"
    if layer == "common" and inc_layer == "suites":
        return "common/ includes nothing from suites/ (what suites share belongs in common/)"
    if layer == "suites" and inc_layer == "suites":
        parts, inc_parts = source.split("/"), included.split("/")
        if len(parts) > 2 and len(inc_parts) > 2 and parts[1] != inc_parts[1]:
            if parts[1] == "trainmem":
                return "the driver names no technique: it reaches them through their registrations"
            return f"suites/{parts[1]}/ does not include another suite (suites/{inc_parts[1]}/)"
    return None


def check(root: pathlib.Path, known=KNOWN) -> list[str]:
    errors, used = [], set()
    for layer in ("kernels", "common", "suites"):
        for path in sorted((root / layer).rglob("*")):
            if path.suffix not in SOURCES or not path.is_file():
                continue
            source = path.relative_to(root).as_posix()
            text = path.read_text(encoding="utf-8", errors="replace")
            for included in INCLUDE.findall(text):
                why = violation(source, included)
                if why is None:
                    continue
                if (source, included) in known:
                    used.add((source, included))
                    continue
                errors.append(f'{source}: #include "{included}": {why}')
    for source, included in sorted(set(known) - used):
        errors.append(f'ci/check_includes.py: KNOWN lists {source} -> {included}, which is no longer there: '
                      "take it out of the list")
    return errors


def self_test() -> int:
    """The check fails on each kind of violation and passes a clean tree."""
    cases = {
        "kernels/cpu/op.cpp": ('#include "common/tensor/tensor.h"\n', True),
        "common/train/x.cpp": ('#include "suites/zero/zero_memory.h"\n', True),
        "suites/fsdp/y.cpp": ('#include "suites/zero/zero_memory.h"\n', True),
        "suites/trainmem/z.cpp": ('#include "suites/zero/zero_technique.h"\n', True),
        "suites/zero/ok.cpp": ('#include "suites/zero/zero_memory.h"\n#include "common/train/technique.h"\n', False),
        "suites/trainmem/ok.cpp": ('#include "suites/trainmem/techniques.h"\n#include <vector>\n', False),
        "common/ok.cpp": ('#include "kernels/ops.h"\n', False),
    }
    failed = []
    for name, (text, bad) in cases.items():
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp)
            for layer in ("kernels", "common", "suites"):
                (root / layer).mkdir()
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            errors = check(root, known=set())
            if bool(errors) != bad:
                failed.append(f"{name}: expected {'a violation' if bad else 'none'}, got {errors}")
    with tempfile.TemporaryDirectory() as tmp:  # a stale KNOWN entry fails
        root = pathlib.Path(tmp)
        for layer in ("kernels", "common", "suites"):
            (root / layer).mkdir()
        if not check(root, known={("suites/a/a.cpp", "suites/b/b.h")}):
            failed.append("a KNOWN entry that matches nothing passed")
    for line in failed:
        print(f"check_includes self-test: {line}", file=sys.stderr)
    print(f"check_includes self-test: {len(cases) + 1 - len(failed)} of {len(cases) + 1} cases as expected")
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(argv[1]) if len(argv) > 1 else pathlib.Path(__file__).resolve().parents[1]
    errors = check(root)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"check_includes: {len(errors)} include(s) against the direction of dependencies (DESIGN.md)",
              file=sys.stderr)
        return 1
    print("check_includes: every include points one way")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
