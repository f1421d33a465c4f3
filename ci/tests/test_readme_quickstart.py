"""The top README's `trainmem` examples print what the README says they print.

Convention (README.md): a fenced block opened with ```console holds commands and their output.
A line starting with `$ trainmem ` is a command (a line ending in a backslash continues on the
next one); the lines after it, up to the next command or the end of the block, are its expected
output (stdout and stderr together, in the order written). A line that is exactly `...` stands for any number of real lines
(the README cuts a long output there). Other fenced blocks (```sh) are not run.

Each command runs with `trainmem` replaced by $TRAINMEM_BUILD_DIR/suites/trainmem/trainmem, in
a folder that holds only the repository's sample files the README names (SAMPLE_FILES), and its output is compared with the README's line by line: the text and every
number must be identical, except the fields that measure time, which differ from run to run
(`12.3 ms`, `35043 tok/s`, `ETA 0:07`, `in 2.19 s`): those are replaced by a placeholder on both
sides. Runs of spaces count as one, because a time field's width changes the padding after it.
Memory figures, losses, batch sizes and parameter counts are all checked (tiny's losses, printed to
4 decimals, were the same under OpenBLAS's Prescott, Nehalem, SkylakeX and Zen kernels and with
one thread). The exit status must
be the one the README shows after the output as `[exit N]`, or 0 when it shows none.
"""
from __future__ import annotations

import os
import pathlib
import re
import shlex
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
README = REPO / "README.md"

# Fields that measure time (they vary from run to run): replaced by a placeholder on both sides.
VOLATILE = [
    (re.compile(r"\b\d+(?:\.\d+)? ?(?:ms|µs|us)\b"), "<time>"),
    (re.compile(r"\b\d+(?:\.\d+)?k? tok/s\b"), "<rate>"),
    (re.compile(r"\bETA \d+:\d\d(?::\d\d)?"), "ETA <eta>"),
    (re.compile(r"\bin \d+(?:\.\d+)? s\b"), "in <time>"),
]
EXIT = re.compile(r"^\[exit (\d+)\]$")
# The repository's files an example reads, by the name it uses: copied into its folder.
SAMPLE_FILES = {"small-cnn-training.pickle": REPO / "common/tests/data/snapshots/small-cnn-training.pickle",
                "common/tests/data/hf_configs/Qwen2.5-7B": REPO / "common/tests/data/hf_configs/Qwen2.5-7B",
                "common/tests/data/hf_configs/Mixtral-8x7B": REPO / "common/tests/data/hf_configs/Mixtral-8x7B"}


class Example:
    def __init__(self, line_no: int, command: str):
        self.line_no = line_no
        self.command = command
        self.expected: list[str] = []
        self.exit_status = 0

    def __repr__(self) -> str:
        return f"README.md:{self.line_no}: $ {self.command}"


def examples(text: str) -> list[Example]:
    found: list[Example] = []
    in_console = False
    current: Example | None = None
    continued = False
    for no, line in enumerate(text.splitlines(), start=1):
        if not in_console:
            in_console = line.strip() == "```console"
            continue
        if line.startswith("```"):
            in_console, current = False, None
            continue
        if continued:
            current.command += " " + line.strip().removesuffix("\\").strip()
            continued = line.endswith("\\")
        elif line.startswith("$ "):
            assert line.startswith("$ trainmem "), f"README.md:{no}: a console block runs trainmem only: {line}"
            current = Example(no, line[2:].strip().removesuffix("\\").strip())
            continued = line.endswith("\\")
            found.append(current)
        elif current is not None and EXIT.match(line):
            current.exit_status = int(EXIT.match(line).group(1))
        elif current is not None:
            current.expected.append(line)
        else:
            raise AssertionError(f"README.md:{no}: output before any command in a console block")
    return found


def normal(line: str) -> str:
    for pattern, placeholder in VOLATILE:
        line = pattern.sub(placeholder, line)
    return " ".join(line.split())


def compare(expected: list[str], real: list[str]) -> str | None:
    """None if `real` is `expected` with the README's `...` gaps; else what differs."""
    i = 0
    gap = False
    for want in expected:
        if want.strip() == "...":
            gap = True
            continue
        if gap:
            while i < len(real) and normal(real[i]) != normal(want):
                i += 1
            if i == len(real):
                return f"not found after a `...`: {want!r}"
        elif i == len(real):
            return f"the output ends before {want!r}"
        elif normal(real[i]) != normal(want):
            return f"line {i + 1} differs:\n  README: {want!r}\n  real:   {real[i]!r}"
        i += 1
        gap = False
    if not gap and i != len(real):
        return f"the output goes on after the README's last line: {real[i]!r}"
    return None


README_EXAMPLES = examples(README.read_text())


def test_the_readme_has_its_quick_start():
    """The quick start's six questions and the training example are checked blocks."""
    commands = [e.command for e in README_EXAMPLES]
    assert any("--gpu rtx4090-24gb" in c and "gpt2-1.5b" in c for c in commands), commands
    assert any("--zero 3" in c and "--world-size 8" in c for c in commands), commands
    assert any("gpt2-124m" in c and "--recompute selective" in c for c in commands), commands
    assert any(c.startswith("trainmem plan ") and "--global-batch" in c for c in commands), commands
    assert any(c.startswith("trainmem train ") for c in commands), commands
    assert any(c.startswith("trainmem estimate ") and "--hf-config" in c for c in commands), commands
    assert any(c.startswith("trainmem replay ") and "--what-if" in c for c in commands), commands
    for example in README_EXAMPLES:
        assert any(line.strip() and line.strip() != "..." for line in example.expected), f"{example}: no output shown"


def test_the_comparison_sees_an_edited_figure():
    real = ["peak allocated 4.80 MiB | 12.5 ms", "done: 3 steps in 0.12 s | 35043 tok/s"]
    assert compare(["peak allocated 4.80 MiB | 9.1 ms", "..."], real) is None
    assert compare(["...", "done: 3 steps in 9.99 s | 1 tok/s"], real) is None
    assert compare(["peak allocated 4.81 MiB | 12.5 ms", "..."], real) is not None
    assert compare(["peak allocated 4.80 MiB | 12.5 ms"], real) is not None  # a line left out
    assert compare(["...", "done: 4 steps in 0.12 s | 35043 tok/s"], real) is not None


@pytest.fixture(scope="module")
def trainmem() -> pathlib.Path:
    build = os.environ.get("TRAINMEM_BUILD_DIR")
    if not build:
        pytest.skip("TRAINMEM_BUILD_DIR not set: no trainmem to run the README's examples with (ci/test sets it)")
    binary = (REPO / build / "suites" / "trainmem" / "trainmem").resolve()
    if not binary.is_file():
        pytest.skip(f"{binary} is not built: the README's examples are not run")
    return binary


@pytest.mark.parametrize("example", README_EXAMPLES, ids=lambda e: f"line{e.line_no}")
def test_readme_example_prints_what_the_readme_says(example, trainmem, tmp_path):
    argv = shlex.split(example.command)
    argv[0] = str(trainmem)
    for name, source in SAMPLE_FILES.items():
        if name in argv:  # a file, or a folder (a config.json's), at the path the example names
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, tmp_path / name)
            else:
                shutil.copyfile(source, tmp_path / name)
    # stdout and stderr in one pipe, in the order they are written, as a terminal shows them.
    # CUDA_VISIBLE_DEVICES hides any GPU: the README's outputs are a machine's without one (with
    # a GPU, `--device auto` picks it and an estimate without --gpu follows the CUDA pattern).
    run = subprocess.run(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "COLUMNS": "200"})
    real = run.stdout.splitlines()
    assert run.returncode == example.exit_status, (
        f"{example}: exit {run.returncode}, the README says {example.exit_status}\n{run.stdout}")
    difference = compare(example.expected, real)
    assert difference is None, f"{example}: {difference}\nthe whole output:\n" + "\n".join(real)
