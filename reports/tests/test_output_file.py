"""Report files are written whole or not at all (reports/trainmem_report/output_file.py)."""
from __future__ import annotations

import errno
import os
import pathlib
import re
import stat
import subprocess
import sys

import matplotlib.figure
import pytest

from conftest import REPO
from reports.trainmem_report import html, plots
from reports.trainmem_report.__main__ import main
from reports.trainmem_report.document import Document
from reports.trainmem_report.errors import OutputError
from reports.trainmem_report.output_file import write_file


def test_a_new_file_gets_the_mode_open_would_give_it(tmp_path):
    old = os.umask(0o022)
    try:
        write_file(tmp_path / "summary.md", lambda p: p.write_text("# new\n"))
    finally:
        os.umask(old)
    assert (tmp_path / "summary.md").read_text() == "# new\n"
    assert stat.S_IMODE((tmp_path / "summary.md").stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.md"]  # no temporary file left


def test_a_replaced_file_gets_the_new_contents_and_keeps_its_mode(tmp_path):
    target = tmp_path / "index.html"
    target.write_text("an earlier page, longer than the new one")
    target.chmod(0o640)
    write_file(target, lambda p: p.write_text("new"))
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_a_failing_writer_keeps_the_earlier_file_byte_for_byte(tmp_path):
    target = tmp_path / "index.html"
    target.write_bytes(b"the earlier page")

    def half_then_full_disk(p):
        p.write_text("half of a new pa")
        raise OSError(28, "No space left on device")

    with pytest.raises(OutputError, match=f"cannot write {target}: No space left on device"):
        write_file(target, half_then_full_disk)
    assert target.read_bytes() == b"the earlier page"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.html"]


def test_an_interrupted_writer_leaves_no_temporary_file(tmp_path):
    def interrupted(p):
        p.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_file(tmp_path / "plot.png", interrupted)
    assert list(tmp_path.iterdir()) == []


def test_a_symbolic_link_stays_a_link(tmp_path):
    (tmp_path / "run-42.md").write_text("old")
    (tmp_path / "latest.md").symlink_to("run-42.md")
    write_file(tmp_path / "latest.md", lambda p: p.write_text("new"))
    assert (tmp_path / "latest.md").is_symlink()
    assert (tmp_path / "run-42.md").read_text() == "new"


def test_a_device_is_written_in_place():
    write_file("/dev/null", lambda p: p.write_text("nothing"))  # not replaced by a regular file
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_the_report_writers_use_it(tmp_path, monkeypatch):
    """A page or a plot whose writing fails keeps the earlier one (html.write, plots._save)."""
    page, png = tmp_path / "index.html", tmp_path / "plots" / "p.png"
    png.parent.mkdir()
    page.write_text("earlier page")
    png.write_bytes(b"earlier png")

    write_text = pathlib.Path.write_text

    def half_a_page_then_full_disk(self, text, *args, **kwargs):
        write_text(self, text[:len(text) // 2])
        raise OSError(28, "No space left on device")

    def half_a_png_then_full_disk(self, fname, *args, **kwargs):
        pathlib.Path(fname).write_bytes(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_text", half_a_page_then_full_disk)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", half_a_png_then_full_disk)
    with pytest.raises(OutputError):
        html.write(Document(title="t"), page)
    with pytest.raises(OutputError):
        plots.category_bars([("a", {"activations": 1.0}, None)], "t", png)
    assert page.read_text() == "earlier page"
    assert png.read_bytes() == b"earlier png"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["index.html", "p.png", "plots"]


def small_results(fixture_copy, tmp_path) -> pathlib.Path:
    """A results folder of two files: quick to render."""
    folder = tmp_path / "small"
    folder.mkdir()
    for name in ("device.json", "bench_checkpointing.json"):
        (folder / name).write_bytes((fixture_copy / name).read_bytes())
    return folder


def test_an_output_folder_that_cannot_be_made_is_a_one_line_error(fixture_copy, tmp_path):
    """(issue 25, item 5: a traceback before.)"""
    (tmp_path / "a-file").write_text("not a folder")
    out = tmp_path / "a-file" / "report"
    run = subprocess.run([sys.executable, "-m", "reports.trainmem_report", "render",
                          str(small_results(fixture_copy, tmp_path)), "-o", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1
    assert run.stderr.strip() == f"trainmem report: error: cannot create the folder {out}: Not a directory"


def full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_while_writing_the_page_is_an_error_and_keeps_the_earlier_files(fixture_copy, tmp_path,
                                                                                     monkeypatch, capsys):
    folder = small_results(fixture_copy, tmp_path)
    assert main(["render", str(folder)]) == 0
    earlier = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    monkeypatch.setattr(pathlib.Path, "write_text", full_disk)
    assert main(["render", str(folder)]) == 1
    assert capsys.readouterr().err.strip() == \
        f"trainmem report: error: cannot write {folder / 'index.html'}: No space left on device"
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == earlier  # no half file, no temporary


def test_a_full_disk_while_writing_a_plot_is_an_error_not_a_missing_plot(fixture_copy, tmp_path, monkeypatch,
                                                                         capsys):
    """A plot that cannot be written stops the render: before, it became a line "could not be drawn"
    and the command succeeded with a report that lacked it."""
    folder = small_results(fixture_copy, tmp_path)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full_disk)
    assert main(["render", str(folder)]) == 1
    assert re.fullmatch(rf"trainmem report: error: cannot write {re.escape(str(folder))}/plots/\S+\.png: "
                        "No space left on device", capsys.readouterr().err.strip())
    assert not (folder / "index.html").exists() and not list((folder / "plots").iterdir())
