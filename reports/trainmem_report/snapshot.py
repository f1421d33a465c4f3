"""`trainmem train --memory-snapshot` JSON -> the pickle file PyTorch's memory visualizer opens
(pytorch.org/memory_viz reads the pickle of torch.cuda.memory._snapshot()'s dict: plain dicts,
lists, ints and strings). The JSON already has that structure (common/allocator/memory_snapshot.h);
this checks it and pickles it.
"""
from __future__ import annotations

import pathlib
import pickle

from .errors import InputError
from .input_file import read_json
from .output_file import make_folder, write_file

SEGMENT_KEYS = {"device", "address", "total_size", "stream", "segment_type", "allocated_size",
                "active_size", "requested_size", "blocks"}
BLOCK_KEYS = {"address", "size", "requested_size", "state"}
TRACE_KEYS = {"action", "addr", "size", "stream", "frames"}


class SnapshotError(InputError):
    """The file is not a memory snapshot; the message says what is wrong."""


def check_snapshot(snap: object) -> dict:
    """Raises SnapshotError naming the first thing that is not in PyTorch's structure."""
    if not isinstance(snap, dict) or not isinstance(snap.get("segments"), list) \
            or not isinstance(snap.get("device_traces"), list):
        raise SnapshotError("not a memory snapshot: needs a 'segments' list and a 'device_traces' list")
    for i, seg in enumerate(snap["segments"]):
        if not isinstance(seg, dict):
            raise SnapshotError(f"segment {i} is not an object")
        missing = SEGMENT_KEYS - set(seg)
        if missing:
            raise SnapshotError(f"segment {i} lacks {sorted(missing)}")
        if not isinstance(seg["blocks"], list):
            raise SnapshotError(f"segment {i}'s blocks are not a list")
        for j, block in enumerate(seg["blocks"]):
            if not isinstance(block, dict):
                raise SnapshotError(f"segment {i} block {j} is not an object")
            if BLOCK_KEYS - set(block):
                raise SnapshotError(f"segment {i} block {j} lacks {sorted(BLOCK_KEYS - set(block))}")
    for d, trace in enumerate(snap["device_traces"]):
        if not isinstance(trace, list):
            raise SnapshotError(f"device {d}'s trace is not a list")
        for k, entry in enumerate(trace):
            if not isinstance(entry, dict):
                raise SnapshotError(f"device {d} trace entry {k} is not an object")
            if TRACE_KEYS - set(entry):
                raise SnapshotError(f"device {d} trace entry {k} lacks {sorted(TRACE_KEYS - set(entry))}")
    return snap


def snapshot_to_pickle(json_path: pathlib.Path, pickle_path: pathlib.Path) -> pathlib.Path:
    snap = read_json(pathlib.Path(json_path))  # InputError: unreadable, too large, not JSON
    check_snapshot(snap)
    make_folder(pickle_path.parent)
    # Protocol 4: Python's default since 3.8, what torch's _dump_snapshot writes.
    return write_file(pickle_path, lambda p: p.write_bytes(pickle.dumps(snap, protocol=4)))
