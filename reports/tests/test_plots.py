"""Plots a reader can trust (issue 27, item 11): plain tick labels on log axes, one colour per
method in every plot, loss curves that can be told apart when they lie on each other, the
attention plots saying what stays fixed as T grows, wide tables that fit, and the techniques side
by side against one baseline."""
from __future__ import annotations

import re

import pytest
from matplotlib.colors import to_hex

from conftest import section_tables
from reports.trainmem_report import plots
from reports.trainmem_report.__main__ import main

PLAIN_NUMBER = re.compile(r"^(-?\d+(\.\d+)?)?$")  # "", "4", "0.5", "128": no 10^k, no ×


def tick_texts(fig):
    fig.canvas.draw()
    ax = fig.axes[0]
    return [t.get_text() for axis in (ax.xaxis, ax.yaxis) for minor in (False, True)
            for t in axis.get_ticklabels(minor=minor)]


@pytest.mark.parametrize("ys", [[2.0, 4.0, 8.0], [0.3, 3.0, 300.0], [40.0, 41.0, 45.0]])
def test_log_axes_have_plain_tick_labels(ys):
    fig = plots.lines_figure({"naive D=64": list(zip([128, 256, 512], ys))}, "t", "T", "MiB", logx=True, logy=True)
    texts = tick_texts(fig)
    assert any(texts), "some ticks are labelled"
    assert all(PLAIN_NUMBER.match(t) for t in texts), texts


def colours_by_label(fig) -> dict[str, str]:
    return {line.get_label(): to_hex(line.get_color()) for line in fig.axes[0].get_lines()}


def test_a_method_has_one_colour_in_every_plot():
    scaling = colours_by_label(plots.lines_figure({"naive D=64": [(1, 1), (2, 2)], "flash D=64": [(1, 1), (2, 1)]},
                                                  "t", "x", "y"))
    train = colours_by_label(plots.lines_figure({"flash": [(1, 1), (2, 2)], "naive": [(1, 2), (2, 4)]}, "t", "x", "y"))
    assert scaling["flash D=64"] == train["flash"] != train["naive"] == scaling["naive D=64"]
    losses = colours_by_label(plots.loss_curves_figure({"bf16": [(1, 3.0), (2, 2.0)], "fp32": [(1, 3.0), (2, 2.0)]}, "t"))
    point = plots.TradeoffPoint("bf16", 10.0, 2**20, 0.5, True)
    tradeoff = plots.tradeoff_figure({"small": [point, plots.TradeoffPoint("fp32", 9.0, 2**21, 0.5, True)]}, "t", "x", "y")
    dots = {to_hex(c.lines[0].get_color()) for c in tradeoff.axes[0].containers}  # the error-bar points
    assert losses["bf16"] == to_hex(plots.color_of("bf16")) and to_hex(plots.color_of("bf16")) in dots
    assert losses["bf16"] != losses["fp32"]


def test_loss_curves_lying_on_each_other_can_be_told_apart():
    same = [(s, 5.0 - s / 10) for s in range(1, 21)]
    fig = plots.loss_curves_figure({"fp32": same, "bf16": same, "fp16": same}, "t")
    styles = [(line.get_linestyle(), line.get_marker()) for line in fig.axes[0].get_lines()]
    assert len(set(styles)) == 3, styles


@pytest.fixture(scope="module")
def rendered_fixture(tmp_path_factory):
    import shutil
    from conftest import FIXTURE
    copy = tmp_path_factory.mktemp("plots") / "cpu-quick"
    shutil.copytree(FIXTURE, copy)
    assert main(["render", str(copy)]) == 0
    return copy


def test_the_attention_plots_say_what_stays_fixed(rendered_fixture):
    summary = (rendered_fixture / "summary.md").read_text()
    captions = [line for line in summary.splitlines() if line.startswith("![Attention")]
    assert captions
    for caption in captions:
        assert "B·T = 1024 fixed" in caption, caption  # the CPU shapes: B = 1024 / T


def test_wide_tables_scroll_inside_the_page(rendered_fixture):
    page = (rendered_fixture / "index.html").read_text()
    tables = page.count("<table>")
    assert tables and page.count('<div class="wide"><table>') == tables
    assert re.search(r"\.wide\s*{[^}]*overflow-x:\s*auto", page)


def test_techniques_side_by_side_against_one_baseline(rendered_fixture):
    summary = (rendered_fixture / "summary.md").read_text()
    [(header, rows)] = section_tables(summary, "Techniques side by side")
    assert header[:4] == ["technique", "setting", "peak allocated", "memory saved"]
    techniques = {row[0] for row in rows}
    assert {"Activation checkpointing", "Mixed precision"} <= techniques, techniques
