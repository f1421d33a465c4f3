"""The page of a snapshot replay (reports/trainmem_report/replay_page.py): every number in summary.md
is the replay JSON's, both plots are written, the what-if table has every row, and a file that is not
a snapshot replay is a one-line error naming the key, with nothing written.

Two replays of the real snapshot (../shared/snapshots, committed as common/tests/data/snapshots):
  fixture  fixtures/replay-small-cnn.json, written by
           `trainmem replay common/tests/data/snapshots/small-cnn-training.pickle --what-if --json`
  live     the same command run now with the build of TRAINMEM_BUILD_DIR (ci/test sets it)
"""
from __future__ import annotations

import copy
import json
import os
import pathlib
import re
import subprocess

import pytest

from conftest import REPO, md_text, section_tables
from reports.trainmem_report import plots
from reports.trainmem_report.__main__ import main
from reports.trainmem_report.document import fmt_bytes, fmt_exact_bytes
from reports.trainmem_report.replay_page import (TIMELINE_PLOT, WHAT_IF_PLOT, ReplayError, check_replay,
                                                  default_out, render_replay)

FIXTURE = REPO / "reports" / "tests" / "fixtures" / "replay-small-cnn.json"
SNAPSHOT = REPO / "common" / "tests" / "data" / "snapshots" / "small-cnn-training.pickle"


@pytest.fixture(scope="session", params=["fixture", "live"])
def replay_doc(request) -> dict:
    if request.param == "fixture":
        return json.loads(FIXTURE.read_text())
    build = os.environ.get("TRAINMEM_BUILD_DIR")
    if not build:
        pytest.skip("TRAINMEM_BUILD_DIR not set: no live trainmem replay (ci/test sets it)")
    binary = (REPO / build / "suites" / "trainmem" / "trainmem").resolve()
    if not binary.is_file():
        pytest.skip(f"{binary} is not built: no live trainmem replay")
    run = subprocess.run([str(binary), "replay", str(SNAPSHOT), "--what-if", "--json"],
                         capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def write(tmp_path: pathlib.Path, doc: object, name: str = "replay.json") -> pathlib.Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_the_page_shows_the_replays_numbers(tmp_path, replay_doc):
    out = render_replay(write(tmp_path, replay_doc), tmp_path / "page")
    assert (out / "plots" / TIMELINE_PLOT).stat().st_size > 0
    assert (out / "plots" / WHAT_IF_PLOT).stat().st_size > 0
    text = md_text((out / "summary.md").read_text())
    assert "index.html" in [p.name for p in out.iterdir()]
    peaks = replay_doc["peaks"]
    # The recorded peaks of ../shared/snapshots/README.md, to the byte, and where they were.
    assert peaks["recorded_reserved"]["bytes"] == 134217728
    assert fmt_exact_bytes(134217728) in text and fmt_exact_bytes(108258676) in text
    assert f"event {peaks['recorded_reserved']['event']:,} ({peaks['recorded_reserved']['phase']}" in text
    # Each phase's row, each what-if row, in the JSON's order.
    summary = (out / "summary.md").read_text()
    (_, phase_rows), = section_tables(summary, "Where the memory went")
    assert [r[0] for r in phase_rows] == [row["phase"] for row in replay_doc["phases"]["table"]]
    for cells, row in zip(phase_rows, replay_doc["phases"]["table"]):
        assert cells[1] == f"{row['events']:,}"
        assert cells[3] == fmt_bytes(row["recorded_peak_reserved_bytes"])
        assert cells[4] == fmt_bytes(row["replayed_peak_allocated_bytes"])
    (_, what_if_rows), = section_tables(summary, "What if")
    assert [r[0] for r in what_if_rows] == [row["label"] for row in replay_doc["what_if"]]
    for cells, row in zip(what_if_rows, replay_doc["what_if"]):
        assert cells[1] == fmt_bytes(row["peak_reserved_bytes"]) and cells[4] == f"{row['num_device_alloc']:,}"
    assert replay_doc["lowest_peak_reserved"]["label"] in text


def test_the_replayed_timeline_is_the_recorded_one_when_nothing_differs(replay_doc):
    # As recorded, with no divergence: the same peaks, each reached in the same phase.
    assert replay_doc["comparison"]["divergence"] is None
    t = replay_doc["timeline"]
    assert len(t["recorded"]["event"]) <= t["points"] and len(t["replayed"]["event"]) <= t["points"]
    assert max(t["recorded"]["reserved_bytes"]) == max(t["replayed"]["reserved_bytes"]) == 134217728
    assert max(t["recorded"]["requested_bytes"]) == 108258676
    peaks = replay_doc["peaks"]
    assert peaks["replayed_reserved"]["bytes"] == peaks["recorded_reserved"]["bytes"]
    assert peaks["replayed_reserved"]["phase"] == peaks["recorded_reserved"]["phase"]
    spans = replay_doc["phases"]["spans"]
    assert spans[0]["first_event"] == 0 and spans[-1]["last_event"] == replay_doc["snapshot"]["trace_events"] - 1
    assert all(a["last_event"] + 1 == b["first_event"] for a, b in zip(spans, spans[1:]))


def test_the_command_line_writes_the_page_beside_the_file(tmp_path, capsys):
    path = write(tmp_path, json.loads(FIXTURE.read_text()), "mine.json")
    assert main(["replay", str(path)]) == 0
    assert (default_out(path) / "index.html").exists()
    assert default_out(path).name == "mine-page"
    assert "index.html" in capsys.readouterr().out


def damaged(change) -> dict:
    doc = copy.deepcopy(json.loads(FIXTURE.read_text()))
    change(doc)
    return doc


@pytest.mark.parametrize("change, message", [
    (lambda d: d.clear() or d.update({"events": 3, "summary": {}}), "not a replay of a PyTorch memory snapshot"),
    (lambda d: d.pop("timeline"), "timeline is missing"),
    (lambda d: d["timeline"]["recorded"]["reserved_bytes"].pop(), "differ in length"),
    (lambda d: d["timeline"]["replayed"]["allocated_bytes"].__setitem__(3, -5), "timeline.replayed.allocated_bytes[3]"),
    (lambda d: d["timeline"]["recorded"]["event"].reverse(), "not in increasing order"),
    (lambda d: d["phases"]["table"].__setitem__(0, "forward"), "phases.table[0] is a string"),
    (lambda d: d["peaks"]["recorded_reserved"].__setitem__("bytes", True), "peaks.recorded_reserved.bytes is a boolean"),
    (lambda d: d["what_if"][1].pop("peak_reserved_bytes"), "what_if[1].peak_reserved_bytes is missing"),
])
def test_a_file_that_is_not_a_replay_is_one_line_naming_the_key(tmp_path, capsys, change, message):
    path = write(tmp_path, damaged(change))
    with pytest.raises(ReplayError, match=re.escape(message)):
        check_replay(json.loads(path.read_text()), path.name)
    assert main(["replay", str(path), "-o", str(tmp_path / "page")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "page").exists()  # nothing written


def test_a_replay_without_what_if_or_phases_still_renders(tmp_path):
    def strip(d):
        for key in ("what_if", "lowest_peak_reserved", "what_if_device_memory_bytes"):
            d.pop(key)
        d["timeline"].pop("lowest_peak_setting")
        d["phases"].update({"sources": [], "spans": [], "spans_total": 0})
        for p in d["peaks"].values():
            p.update({"phase": None, "step": None})
    out = render_replay(write(tmp_path, damaged(strip)), tmp_path / "page")
    text = md_text((out / "summary.md").read_text())
    assert "records no phases" in text
    assert "without --what-if" in text
    assert not (out / "plots" / WHAT_IF_PLOT).exists()


def test_the_timeline_draws_thousands_of_spans(tmp_path):
    spans = [("forward" if i % 2 else "backward", 10 * i, 10 * i + 9) for i in range(4000)]
    series = [plots.Series("recorded reserved", list(range(0, 40000, 40)), [float(i % 97) * 2**20 for i in range(1000)],
                           "black")]
    path = plots.snapshot_timeline(series, spans, [("peak", 5, 96 * 2**20)], "many", tmp_path / "t.png")
    assert path.stat().st_size > 0
