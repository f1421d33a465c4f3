"""summary.md shows every text from the result files as written (issue 25, item 6): read by a
CommonMark parser with raw HTML on (as GitHub reads it, before its sanitizer), a name made of
Markdown and HTML gives no HTML, no link and no image but the plot files, and its text unchanged."""
from __future__ import annotations

import json
import shutil

import pytest

from reports.trainmem_report.__main__ import main

markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py is not installed (ci/setup installs it)")

HOSTILE = "<img src=http://example.com/t.png> [a](http://example.com) ![b](http://example.com/i.png) " \
          "*em* _u_ `code` a|b ~~s~~ &amp; <script>alert(1)</script> \\* # h"
SETTING = HOSTILE.replace("/", " ")  # a benchmark's name is split at "/"


def inline_tokens(tokens):
    for t in tokens:
        yield t
        yield from inline_tokens(t.children or [])


@pytest.fixture
def hostile_results(fixture_copy, tmp_path):
    folder = tmp_path / "hostile"
    folder.mkdir()
    info = json.loads((fixture_copy / "device.json").read_text())
    info["device"].update(kind="cuda", name=HOSTILE, driver_version=HOSTILE)
    (folder / "device.json").write_text(json.dumps(info))
    data = json.loads((fixture_copy / "bench_baseline.json").read_text())
    data["benchmarks"][0]["name"] = f"BM_TrainStep/x/{SETTING}"
    (folder / "bench_hostile.json").write_text(json.dumps(data))  # not in the catalog: a generic table
    (folder / "train-# 1. <b>.json").write_text(json.dumps({"hello": 1}))  # a malformed file, listed as missing
    shutil.copy(fixture_copy / "bench_checkpointing.json", folder)  # a suite with plots and file links
    return folder


def test_text_from_the_results_is_shown_as_written_in_summary_md(hostile_results):
    assert main(["render", str(hostile_results)]) == 0
    md = markdown_it.MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    summary = (hostile_results / "summary.md").read_text()
    tokens = list(inline_tokens(md.parse(summary)))

    assert not [t for t in tokens if t.type in ("html_inline", "html_block", "s_open", "code_inline", "strong_open")]
    # the only emphasis: the tables' captions, each a line *caption*
    captions = [line for line in summary.splitlines() if line.startswith("*")]
    assert captions and len([t for t in tokens if t.type == "em_open"]) == len(captions)
    targets = [t.attrGet("href") or t.attrGet("src") for t in tokens if t.type in ("link_open", "image")]
    assert targets and all((hostile_results / target).is_file() for target in targets), targets

    texts = [t.content for t in tokens if t.type == "text"]
    assert f"trainmem report: {HOSTILE}" in texts  # the title: the device's name
    assert HOSTILE in texts  # the driver, a cell of its own
    assert SETTING in texts  # the generic table's setting: the name's last part
    assert any(t.startswith("train-# 1. <b>.json: not a ") for t in texts), texts
    headings = [t for t in tokens if t.type == "heading_open"]
    assert [h.tag for h in headings].count("h1") == 1
