"""Report files are written whole or not at all (reports/trainmem_report/output_file.py)."""
from __future__ import annotations

import os
import pathlib
import stat

import matplotlib.figure
import pytest

from reports.trainmem_report import html, plots
from reports.trainmem_report.document import Document
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

    with pytest.raises(OSError, match="No space left"):
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
    with pytest.raises(OSError):
        html.write(Document(title="t"), page)
    with pytest.raises(OSError):
        plots.category_bars([("a", {"activations": 1.0}, None)], "t", png)
    assert page.read_text() == "earlier page"
    assert png.read_bytes() == b"earlier png"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["index.html", "p.png", "plots"]
