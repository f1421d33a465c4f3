"""`trainmem train --memory-snapshot` -> the pickle PyTorch's memory visualizer opens: loaded back
with Python's pickle module, it has PyTorch's structure and its trace replays to its segments."""
from __future__ import annotations

import json
import pickle

import pytest

from reports.trainmem_report.__main__ import main
from reports.trainmem_report.snapshot import SnapshotError, check_snapshot, snapshot_to_pickle

PYTORCH_ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
                   "segment_map", "segment_unmap", "oom", "snapshot"}


@pytest.fixture(scope="module")
def snapshot(results, tmp_path_factory):
    path = snapshot_to_pickle(results / "memory-snapshot.json", tmp_path_factory.mktemp("pickle") / "s.pickle")
    with open(path, "rb") as f:
        return pickle.load(f)


def test_pickle_has_pytorchs_structure(snapshot):
    assert set(snapshot) >= {"segments", "device_traces"}
    assert snapshot["segments"], "a training run leaves segments"
    for seg in snapshot["segments"]:
        assert {"device", "address", "total_size", "stream", "segment_type", "allocated_size", "active_size",
                "requested_size", "blocks", "frames"} <= set(seg)
        assert seg["segment_type"] in ("small", "large")
        assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
        for b in seg["blocks"]:
            assert b["state"] in ("active_allocated", "active_awaiting_free", "inactive")
            assert isinstance(b["address"], int) and isinstance(b["frames"], list)
    assert len(snapshot["device_traces"]) == 1
    trace = snapshot["device_traces"][0]
    assert len(trace) > 100
    for e in trace:
        assert {"action", "addr", "size", "stream", "frames"} <= set(e)
        assert e["action"] in PYTORCH_ACTIONS
        assert {"category", "step", "phase"} <= set(e)  # trainmem's own additions


def test_pickle_trace_replays_to_its_segments(snapshot):
    live, segments = {}, {}
    for e in snapshot["device_traces"][0]:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            del live[e["addr"]]
        elif e["action"] == "segment_alloc":
            segments[e["addr"]] = e["size"]
        elif e["action"] == "segment_free":
            del segments[e["addr"]]
    assert segments == {s["address"]: s["total_size"] for s in snapshot["segments"]}
    assert live == {b["address"]: b["requested_size"] for s in snapshot["segments"] for b in s["blocks"]
                    if b["state"] == "active_allocated"}


def test_a_file_that_is_not_a_snapshot_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"segments": [{"address": 1}], "device_traces": []}))
    with pytest.raises(SnapshotError, match="segment 0 lacks"):
        check_snapshot(json.loads(bad.read_text()))
    assert main(["pickle", str(bad), str(tmp_path / "out.pickle")]) == 2
    assert "segment 0 lacks" in capsys.readouterr().err
    (tmp_path / "cut.json").write_text('{"segments": [')
    assert main(["pickle", str(tmp_path / "cut.json"), str(tmp_path / "out.pickle")]) == 2
    assert not (tmp_path / "out.pickle").exists()
