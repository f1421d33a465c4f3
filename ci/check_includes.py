#!/usr/bin/env python3
"""Dependencies point one way, and a technique's words live in its folder (common/README.md:
"Adding a technique", "Core options and techniques").

1. The includes: fails on an #include that breaks the direction.

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

2. The names (with --names TRAINMEM): each registered technique's flags, as its registration
   declares them (`TRAINMEM flags --by-technique`: "checkpointing --recompute" a line), and in
   suites/ its folder's name as a string ("zero"), are spelled in code outside suites/<technique>/ in at most
   MAX_FILES_OUTSIDE files, and in none under common/ or kernels/: one owner for each word, so a
   technique's vocabulary changes in its folder. Code is the C++ and CMake sources of kernels/,
   common/ and suites/ with comments left out; tests (a folder named tests, a file test_*), the
   fuzz targets, ci/, docs and fixtures aside. A technique's sample setups that combine techniques
   belong to the driver's tests (suites/trainmem/tests/sample_setups.h). The core's options
   (--model, --batch, --precision, --attention ...) are declared by the driver's train
   flags, beside the setup's fields (common/README.md, "Core options and techniques"), and
   belong to no technique. KNOWN_NAMES lists the spellings still to be removed, each with why; it
   may only shrink, as KNOWN.

    ci/check_includes.py [ROOT]                    # the includes of the tree at ROOT (default: this repository)
    ci/check_includes.py [ROOT] --names TRAINMEM   # and the names, the flags read from the TRAINMEM binary
    ci/check_includes.py --self-test

ctest runs all three (check_includes, check_names, check_includes_self_test: CMakeLists.txt).
"""
from __future__ import annotations

import collections
import pathlib
import re
import subprocess
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


MAX_FILES_OUTSIDE = 2
NAME_SOURCES = SOURCES | {".cmake", ".txt"}  # CMakeLists.txt

# (technique, file): a file outside the technique's folder that spells its words and is still to
# stop, with why. It may only shrink: an entry whose file no longer spells them fails the check.
KNOWN_NAMES: dict[tuple[str, str], str] = {}


def without_comments(text: str, suffix: str) -> str:
    """The code of a file, its comments left out (C++: // and /* */; CMake: #)."""
    if suffix in (".cmake", ".txt"):
        return re.sub(r"(?m)#.*$", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"(?m)//.*$", "", text)


def is_code(relative: str) -> bool:
    """Whether the name check reads `relative`: code, tests, fuzz targets and fixtures aside."""
    parts = relative.split("/")
    if parts[0] not in ("kernels", "common", "suites"):
        return False
    if any(p in ("tests", "fuzz", "fixtures") for p in parts[:-1]) or parts[-1].startswith("test_"):
        return False
    suffix = pathlib.PurePosixPath(relative).suffix
    return suffix in SOURCES or suffix == ".cmake" or parts[-1] == "CMakeLists.txt"


def words_of(technique: str, flags: list[str]) -> tuple[list[tuple[str, re.Pattern]], tuple[str, re.Pattern]]:
    """What names a technique: each flag as a word ("--zero", not "--zero-x"), and its folder's name
    as a string ("zero"), which counts in suites/ only (in common/ and kernels/ a folder's name is
    also what they implement, the allocator, the flash attention kernel: there the flags count)."""
    flag_words = [(f, re.compile(r"(?<![\w-])" + re.escape(f) + r"(?![\w-])")) for f in flags]
    return flag_words, (f'"{technique}"', re.compile(re.escape(f'"{technique}"')))


def technique_flags(trainmem: str) -> dict[str, list[str]]:
    """{technique: [flags]} from `trainmem flags --by-technique`."""
    out = subprocess.run([trainmem, "flags", "--by-technique"], check=True, capture_output=True, text=True).stdout
    flags: dict[str, list[str]] = collections.defaultdict(list)
    for line in out.splitlines():
        technique, flag = line.split()
        flags[technique].append(flag)
    return dict(flags)


def check_names(root: pathlib.Path, flags: dict[str, list[str]], known=None) -> list[str]:
    known = KNOWN_NAMES if known is None else known
    code = {}
    for layer in ("kernels", "common", "suites"):
        for path in sorted((root / layer).rglob("*")):
            relative = path.relative_to(root).as_posix()
            if path.is_file() and is_code(relative):
                code[relative] = without_comments(path.read_text(encoding="utf-8", errors="replace"), path.suffix)
    errors, used = [], set()
    for technique, its_flags in sorted(flags.items()):
        flag_words, folder_word = words_of(technique, its_flags)
        spelled = {}
        for relative, text in code.items():
            if relative.startswith(f"suites/{technique}/"):
                continue
            words = flag_words + [folder_word] if relative.startswith("suites/") else flag_words
            found = sorted({word for word, pattern in words if pattern.search(text)})
            if found:
                spelled[relative] = found
        outside = []
        for relative, found in sorted(spelled.items()):
            if (technique, relative) in known:
                used.add((technique, relative))
                continue
            if relative.split("/")[0] in ("common", "kernels"):
                errors.append(f"{relative}: spells {', '.join(found)} of {technique}: common/ and kernels/ name no technique "
                              f"(give the words to suites/{technique}/, or make the option a core one)")
            else:
                outside.append(f"{relative} ({', '.join(found)})")
        if len(outside) > MAX_FILES_OUTSIDE:
            errors.append(f"{technique}'s words are spelled in {len(outside)} files outside suites/{technique}/, more than "
                          f"{MAX_FILES_OUTSIDE}: {'; '.join(outside)} (reach the technique through its registration, or "
                          "move a sample that combines techniques to suites/trainmem/tests/sample_setups.h)")
    for technique, relative in sorted(set(known) - used):
        errors.append(f"ci/check_includes.py: KNOWN_NAMES lists {relative} for {technique}, which no longer spells its "
                      "words: take it out of the list")
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

    def run_on(files: dict[str, str], run) -> list[str]:
        """`run(root)` on a scratch tree holding `files` (and the three layers)."""
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp)
            for layer in ("kernels", "common", "suites"):
                (root / layer).mkdir()
            for name, text in files.items():
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                (root / name).write_text(text)
            return run(root)

    for name, (text, bad) in cases.items():
        errors = run_on({name: text}, lambda root: check(root, known=set()))
        if bool(errors) != bad:
            failed.append(f"{name}: expected {'a violation' if bad else 'none'}, got {errors}")
    if not run_on({}, lambda root: check(root, known={("suites/a/a.cpp", "suites/b/b.h")})):
        failed.append("a KNOWN entry that matches nothing passed")
    name_cases = {  # (files, expect a violation)
        "common spells a flag": ({"common/a.cpp": 'f("--zero 1");\n'}, True),
        "a comment is not code": ({"common/a.cpp": "// --zero 1\n"}, False),
        "a longer flag is another word": ({"common/a.cpp": 'f("--zero-x");\n'}, False),
        "the folder's name as a string": ({"suites/trainmem/a.cpp": 'j["zero"] = 1;\n',
                                           "suites/b/b.cpp": 'f("--zero");\n', "suites/c/c.cpp": 'f("--zero");\n'}, True),
        "common's own word": ({"common/a.cpp": 'j["zero"] = 1;\n'}, False),
        "its own folder": ({"suites/zero/a.cpp": 'f("--zero 1");\n'}, False),
        "a test": ({"suites/trainmem/tests/a.cpp": 'f("--zero 1");\n'}, False),
        "two files outside": ({"suites/a/a.cpp": 'f("--zero");\n', "suites/b/b.cpp": 'f("--zero");\n'}, False),
        "three files outside": ({f"suites/{x}/{x}.cpp": 'f("--zero");\n' for x in "abc"}, True),
    }
    for what, (files, bad) in name_cases.items():
        errors = run_on(files, lambda root: check_names(root, {"zero": ["--zero"]}, known={}))
        if bool(errors) != bad:
            failed.append(f"names, {what}: expected {'a violation' if bad else 'none'}, got {errors}")
    if not run_on({}, lambda root: check_names(root, {"zero": ["--zero"]}, known={("zero", "common/a.cpp"): "why"})):
        failed.append("a KNOWN_NAMES entry that matches nothing passed")
    total = len(cases) + 1 + len(name_cases) + 1
    for line in failed:
        print(f"check_includes self-test: {line}", file=sys.stderr)
    print(f"check_includes self-test: {total - len(failed)} of {total} cases as expected")
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    args = argv[1:]
    if args == ["--self-test"]:
        return self_test()
    trainmem = None
    if "--names" in args:
        i = args.index("--names")
        if i + 1 >= len(args):
            print("check_includes: --names needs the trainmem binary (its `flags --by-technique`)", file=sys.stderr)
            return 2
        trainmem = args[i + 1]
        del args[i:i + 2]
    root = pathlib.Path(args[0]) if args else pathlib.Path(__file__).resolve().parents[1]
    errors = check(root)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"check_includes: {len(errors)} include(s) against the direction of dependencies (common/README.md)",
              file=sys.stderr)
        return 1
    print("check_includes: every include points one way")
    if trainmem is None:
        return 0
    errors = check_names(root, technique_flags(trainmem))
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"check_includes: {len(errors)} technique name(s) spelled outside their folder", file=sys.stderr)
        return 1
    print(f"check_includes: every technique's words live in its folder (at most {MAX_FILES_OUTSIDE} files outside, "
          f"{len(KNOWN_NAMES)} known to be removed)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
