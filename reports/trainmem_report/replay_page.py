"""`trainmem replay SNAPSHOT --what-if --json > replay.json` -> a page of its own: index.html,
summary.md and plots/ (the snapshot's timeline and the what-if bars).

The document is what `trainmem replay` prints for a PyTorch memory snapshot
(suites/trainmem/replay_snapshot.h, suites/trainmem/replay_phases.h):

  - `snapshot`: where it came from, its events, the state before recording, the recorded figures;
  - `timeline`: the recorded requested and reserved bytes and the replayed allocated and reserved
    bytes against the trace's events (each point the largest value of a run of events, at most
    `points` points), and with --what-if the lowest-peak setting's;
  - `phases` (each phase's recorded and replayed peaks, and the spans of events in each phase) and
    `peaks` (each peak's event, phase and step);
  - `what_if` (one row per setting) and `lowest_peak_reserved`, with --what-if.

The page shows the real (recorded) timeline beside the replayed one with the phases shaded and
the peaks marked, the phase table, and the what-if table as bars. The document is checked whole
before anything is written (check_replay): a file that is not a snapshot replay, or lacks a key
the page needs, or has a value of the wrong type, is a ReplayError naming the file and the key.
"""
from __future__ import annotations

import pathlib
from dataclasses import dataclass, field

from . import plots
from .document import Document, Figure, Section, Table, fmt_bytes, fmt_exact_bytes
from .errors import InputError
from .input_file import read_json
from .output_file import make_folder
from .page import write_page
from .result_schema import PEAK_ALLOCATED, PEAK_RESERVED
from .results import finite_number

TIMELINE_PLOT = "snapshot-timeline.png"
WHAT_IF_PLOT = "what-if.png"
# trainmem's bound on any size (suites/trainmem/README.md): a larger "byte" count is a broken file.
LARGEST_BYTES = 2.0**62
MAX_POINTS = 100_000  # a timeline longer than this is not a replay's (it writes at most 1,000 points)


class ReplayError(InputError):
    """The file is not a snapshot replay the page can show; the message says which key and why."""


@dataclass
class Line:
    events: list[int]
    values: list[float]


@dataclass
class Replay:
    source: str
    snapshot: dict
    as_recorded: bool
    config: str
    recorded_requested: Line
    recorded_reserved: Line
    replayed_allocated: Line
    replayed_reserved: Line
    lowest: tuple[str, Line] | None        # (the setting, its replayed reserved bytes)
    phase_sources: list[str]
    steps_counted: bool
    phase_rows: list[dict]
    spans: list[tuple[str, int, int]]
    spans_total: int
    peaks: dict[str, dict]
    what_if: list[dict] = field(default_factory=list)
    what_if_capacity: float | None = None
    lowest_peak: dict | None = None
    comparison: dict | None = None
    oom: dict | None = None


class _Check:
    def __init__(self, source: str):
        self.source = source

    def error(self, text: str) -> ReplayError:
        return ReplayError(f"{self.source}: {text}")

    def key(self, obj: dict, key: str, where: str, kind: type | tuple, nullable: bool = False):
        name = f"{where}.{key}" if where else key
        if key not in obj:
            raise self.error(f"{name} is missing")
        value = obj[key]
        if value is None and nullable:
            return None
        if isinstance(value, bool) and kind is not bool:
            raise self.error(f"{name} is a boolean, not {_kind(kind)}")
        if not isinstance(value, kind):
            raise self.error(f"{name} is {_name_of(value)}, not {_kind(kind)}")
        return value

    def count(self, obj: dict, key: str, where: str, nullable: bool = False) -> float | None:
        value = self.key(obj, key, where, (int, float), nullable)
        if value is None:
            return None
        x = finite_number(value)
        if x is None or x < 0 or x > LARGEST_BYTES:
            raise self.error(f"{where}.{key} is {value!r}, not a count of bytes or events")
        return x

    def line(self, obj: dict, where: str, value_key: str) -> tuple[Line, Line]:
        events = self.key(obj, "event", where, list)
        values = self.key(obj, value_key, where, list)
        reserved = self.key(obj, "reserved_bytes", where, list)
        if not len(events) == len(values) == len(reserved):
            raise self.error(f"{where}: event, {value_key} and reserved_bytes differ in length "
                             f"({len(events)}, {len(values)}, {len(reserved)})")
        if len(events) > MAX_POINTS:
            raise self.error(f"{where} has {len(events)} points, more than a replay writes")
        for name, xs in (("event", events), (value_key, values), ("reserved_bytes", reserved)):
            for i, v in enumerate(xs):
                x = finite_number(v)
                if x is None or x < 0 or x > LARGEST_BYTES:
                    raise self.error(f"{where}.{name}[{i}] is {v!r}, not a count")
        if any(b < a for a, b in zip(events, events[1:])):
            raise self.error(f"{where}.event is not in increasing order")
        return Line([int(e) for e in events], [float(v) for v in values]), Line([int(e) for e in events],
                                                                                 [float(v) for v in reserved])


def _kind(kind: type | tuple) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if isinstance(kind, tuple):
        return "a number"
    return names.get(kind, "a number")


def _name_of(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def check_replay(doc: object, source: str) -> Replay:
    """The document read as a Replay; ReplayError for the first thing that is not as
    `trainmem replay SNAPSHOT --json` writes it."""
    c = _Check(source)
    if not isinstance(doc, dict):
        raise c.error(f"not a replay of a snapshot: the document is {_name_of(doc)}, not an object")
    if "snapshot" not in doc:
        raise c.error("not a replay of a PyTorch memory snapshot (no 'snapshot' key): write it with "
                      "`trainmem replay SNAPSHOT --what-if --json > FILE`")
    snapshot = c.key(doc, "snapshot", "", dict)
    c.key(snapshot, "source", "snapshot", str)
    c.count(snapshot, "trace_events", "snapshot")
    if "timeline" not in doc:
        raise c.error("timeline is missing (a replay by a trainmem older than the phases: run the replay again)")
    timeline = c.key(doc, "timeline", "", dict)
    recorded = c.key(timeline, "recorded", "timeline", dict)
    replayed = c.key(timeline, "replayed", "timeline", dict)
    rec_requested, rec_reserved = c.line(recorded, "timeline.recorded", "requested_bytes")
    rep_allocated, rep_reserved = c.line(replayed, "timeline.replayed", "allocated_bytes")
    lowest = None
    if timeline.get("lowest_peak_setting") is not None:
        t = c.key(timeline, "lowest_peak_setting", "timeline", dict)
        lowest = (c.key(t, "allocator_config", "timeline.lowest_peak_setting", str),
                  c.line(t, "timeline.lowest_peak_setting", "allocated_bytes")[1])
    phases = c.key(doc, "phases", "", dict)
    sources = c.key(phases, "sources", "phases", list)
    rows = c.key(phases, "table", "phases", list)
    for i, row in enumerate(rows):
        where = f"phases.table[{i}]"
        if not isinstance(row, dict):
            raise c.error(f"{where} is {_name_of(row)}, not an object")
        c.key(row, "phase", where, str)
        c.count(row, "events", where)
        for k in ("recorded_peak_requested_bytes", "recorded_peak_reserved_bytes"):
            c.count(row, k, where)
        for k in ("replayed_peak_allocated_bytes", "replayed_peak_reserved_bytes"):
            c.count(row, k, where, nullable=True)
    spans = []
    for i, s in enumerate(c.key(phases, "spans", "phases", list)):
        where = f"phases.spans[{i}]"
        if not isinstance(s, dict):
            raise c.error(f"{where} is {_name_of(s)}, not an object")
        spans.append((c.key(s, "phase", where, str), int(c.count(s, "first_event", where)),
                      int(c.count(s, "last_event", where))))
    peaks = c.key(doc, "peaks", "", dict)
    for name in ("recorded_reserved", "recorded_requested", "replayed_reserved", "replayed_allocated"):
        p = c.key(peaks, name, "peaks", dict)
        c.count(p, "bytes", f"peaks.{name}")
        c.count(p, "event", f"peaks.{name}", nullable=True)
        c.key(p, "phase", f"peaks.{name}", str, nullable=True)
    r = Replay(source=source, snapshot=snapshot, as_recorded=bool(doc.get("replayed_as_recorded")),
               config=c.key(doc, "allocator_config", "", str), recorded_requested=rec_requested,
               recorded_reserved=rec_reserved, replayed_allocated=rep_allocated, replayed_reserved=rep_reserved,
               lowest=lowest, phase_sources=[str(s) for s in sources],
               steps_counted=bool(phases.get("steps_counted")), phase_rows=rows, spans=spans,
               spans_total=int(c.count(phases, "spans_total", "phases")), peaks=peaks,
               comparison=doc.get("comparison") if isinstance(doc.get("comparison"), dict) else None,
               oom=doc.get("oom") if isinstance(doc.get("oom"), dict) else None)
    if doc.get("what_if") is not None:
        for i, row in enumerate(c.key(doc, "what_if", "", list)):
            where = f"what_if[{i}]"
            if not isinstance(row, dict):
                raise c.error(f"{where} is {_name_of(row)}, not an object")
            c.key(row, "allocator_config", where, str)
            for k in (PEAK_RESERVED, PEAK_ALLOCATED, "unallocated_at_peak_reserved_bytes",
                      "num_device_alloc"):
                c.count(row, k, where)
            c.key(row, "oom", where, dict, nullable=True)
            r.what_if.append(row)
        r.what_if_capacity = c.count(doc, "what_if_device_memory_bytes", "", nullable=True) \
            if "what_if_device_memory_bytes" in doc else None
        r.lowest_peak = c.key(doc, "lowest_peak_reserved", "", dict)
        c.key(r.lowest_peak, "allocator_config", "lowest_peak_reserved", str)
        c.count(r.lowest_peak, PEAK_RESERVED, "lowest_peak_reserved")
    return r


def read_replay(path: pathlib.Path) -> Replay:
    return check_replay(read_json(pathlib.Path(path)), pathlib.Path(path).name)


# --- the page ----------------------------------------------------------------------------------------

def _place(p: dict) -> str:
    """A peak's place: "event 1,234 (backward, step 2)"."""
    if p.get("event") is None:
        return "before the first event"
    text = f"event {p['event']:,}"
    if p.get("phase"):
        text += f" ({p['phase']}" + (f", step {p['step']}" if p.get("step") else "") + ")"
    return text


def _label(row: dict) -> str:
    return str(row.get("label") or row["allocator_config"])


def _oom_text(oom: dict | None) -> str:
    if not oom:
        return ""
    if oom.get("before_trace"):
        return "before the trace"
    text = f"event {oom.get('event_index')}"
    if oom.get("phase"):
        text += f" ({oom['phase']})"
    return text


def _oom_short(oom: dict | None) -> str:
    """Where a setting ran out, short enough to stand over its bar: "event 758", "before"."""
    if not oom:
        return ""
    return "before the trace" if oom.get("before_trace") else f"event {oom.get('event_index')}"


def header(r: Replay) -> list[str]:
    s = r.snapshot
    before = s.get("before_trace", {}) if isinstance(s.get("before_trace"), dict) else {}
    lines = [f"Snapshot: {s['source']} (device {s.get('device', 0)}, {int(s['trace_events']):,} trace events). "
             f"Replay file: {r.source}.",
             f"Before recording began: {before.get('segments', 0)} segments ({fmt_bytes(before.get('reserved_bytes'))}), "
             f"{before.get('blocks', 0)} live blocks ({fmt_bytes(before.get('requested_bytes'))} requested): the replay "
             "starts from them."]
    how = ("Replayed as recorded: the recorded settings (" + r.config + ") on the recorded device, every decision of "
           "the real allocator compared." if r.as_recorded else f"Replayed under {r.config}.")
    if r.comparison:
        d = r.comparison.get("divergence")
        how += (f" The replay's decisions differ first at event {d.get('event')}: {d.get('what')} (rule: {d.get('rule')})."
                if isinstance(d, dict) else
                f" Every decision was the real allocator's: {r.comparison.get('segment_events_matched')} of "
                f"{r.comparison.get('segment_events_recorded')} segment events, every block at its recorded address.")
    lines.append(how)
    if r.oom:
        lines.append(f"The replay ran out of memory at {_oom_text(r.oom)}.")
    return lines


def timeline_series(r: Replay) -> list[plots.Series]:
    palette = plots._PALETTE
    series = [plots.Series("recorded reserved", r.recorded_reserved.events, r.recorded_reserved.values, "black"),
              plots.Series("replayed reserved", r.replayed_reserved.events, r.replayed_reserved.values, palette[1], "--"),
              plots.Series("recorded requested", r.recorded_requested.events, r.recorded_requested.values, palette[0]),
              plots.Series("replayed allocated", r.replayed_allocated.events, r.replayed_allocated.values, palette[2], "--")]
    if r.lowest:
        name = (r.lowest_peak or {}).get("label") or r.lowest[0]
        series.append(plots.Series(f"reserved under {name} (lowest peak)", r.lowest[1].events,
                                   r.lowest[1].values, palette[3], ":"))
    return series


def peak_marks(r: Replay) -> list[tuple[str, int, float]]:
    marks = []
    if r.oom and r.oom.get("event_index") is not None and r.replayed_reserved.values:
        marks.append((f"the replay ran out of memory at {_oom_text(r.oom)}", int(r.oom["event_index"]),
                      r.replayed_reserved.values[-1]))
    for key, label in (("recorded_reserved", "recorded peak reserved"), ("replayed_reserved", "replayed peak reserved")):
        p = r.peaks[key]
        if p.get("event") is not None:
            marks.append((f"{label}: {fmt_bytes(p['bytes'])} at {_place(p)}", int(p["event"]), float(p["bytes"])))
    return marks


def phase_table(r: Replay) -> Table:
    rows = [[row["phase"], f"{int(row['events']):,}", fmt_bytes(row["recorded_peak_requested_bytes"]),
             fmt_bytes(row["recorded_peak_reserved_bytes"]), fmt_bytes(row.get("replayed_peak_allocated_bytes")),
             fmt_bytes(row.get("replayed_peak_reserved_bytes"))] for row in r.phase_rows]
    return Table(["phase", "events", "recorded peak requested", "recorded peak reserved", "replayed peak allocated",
                  "replayed peak reserved"], rows,
                 caption="Each phase's peaks over its events (requested: the sizes the program asked for, as the "
                         "trace records them; allocated: rounded as the allocator rounds them)")


def what_if_table(r: Replay) -> Table:
    rows = [[_label(row), fmt_bytes(row[PEAK_RESERVED]), fmt_bytes(row[PEAK_ALLOCATED]),
             fmt_bytes(row["unallocated_at_peak_reserved_bytes"]), f"{int(row['num_device_alloc']):,}",
             _oom_text(row.get("oom")) or "no"] for row in r.what_if]
    card = "a card that never refuses" if r.what_if_capacity is None else f"a card of {fmt_bytes(r.what_if_capacity)}"
    return Table(["allocator config", "peak reserved", "peak allocated", "unallocated at peak reserved",
                  "cudaMalloc calls", "out of memory"], rows,
                 caption=f"The same trace under each setting, on {card} (the first row: the replay's own settings)")


def build(r: Replay, out: pathlib.Path) -> Document:
    title = pathlib.PurePath(str(r.snapshot["source"])).name
    doc = Document(f"trainmem replay: {title}", header(r), missing_title="Not shown",
                   nothing_missing="Nothing: every part of the replay is shown.")
    rr, rp = r.peaks["recorded_reserved"], r.peaks["replayed_reserved"]
    where = Section("Where the memory went")
    if r.phase_sources:
        where.paragraphs.append(
            "Phases from " + ", ".join(r.phase_sources) + (
                "; steps counted, a new one after each optimizer step" if r.steps_counted else "") + ".")
    else:
        where.paragraphs.append("The snapshot records no phases (no record_function ranges, no stack frames): record "
                                "with `_record_memory_history(stacks=\"python\")`, or wrap the phases in "
                                "`torch.profiler.record_function`.")
    where.paragraphs.append(f"Recorded peak reserved {fmt_exact_bytes(rr['bytes'])} at {_place(rr)}; replayed "
                            f"{fmt_exact_bytes(rp['bytes'])} at {_place(rp)}. Recorded peak requested "
                            f"{fmt_exact_bytes(r.peaks['recorded_requested']['bytes'])} at "
                            f"{_place(r.peaks['recorded_requested'])}; replayed peak allocated "
                            f"{fmt_exact_bytes(r.peaks['replayed_allocated']['bytes'])} at "
                            f"{_place(r.peaks['replayed_allocated'])}.")
    try:
        figure = plots.snapshot_timeline(timeline_series(r), r.spans, peak_marks(r),
                                         f"{title}: recorded and replayed memory", out / "plots" / TIMELINE_PLOT)
        where.figures.append(Figure(figure, "Recorded (solid) and replayed (dashed) memory against the trace's events; "
                                            "each point is the largest value of a run of events"))
    except plots.TooManyToDraw as e:
        doc.missing.append(f"the timeline: {e}")
    if r.spans_total > len(r.spans):
        doc.missing.append(f"{r.spans_total - len(r.spans):,} of {r.spans_total:,} phase spans past the first "
                           f"{len(r.spans):,} are not shaded (narrower than a point of the plot)")
    where.tables.append(phase_table(r))
    doc.sections.append(where)
    if r.what_if:
        section = Section("What if")
        low = r.lowest_peak or {}
        section.paragraphs.append(
            f"Lowest peak reserved over the whole trace: {low.get('label') or low.get('allocator_config')} "
            f"({fmt_exact_bytes(low.get(PEAK_RESERVED))})" +
            (f"; the smallest card that holds the run with it: {low['smallest_gpu']}." if low.get("smallest_gpu")
             else "; no card of the GPU list holds the run."))
        lowest_config = low.get("allocator_config")
        bars = [plots.WhatIfBar(_label(row), row[PEAK_RESERVED], row[PEAK_ALLOCATED],
                                _oom_short(row.get("oom")), row["allocator_config"] == lowest_config)
                for row in r.what_if]
        try:
            figure = plots.what_if_bars(bars, r.what_if_capacity, f"{title}: what if", out / "plots" / WHAT_IF_PLOT)
            section.figures.append(Figure(figure, "Peak reserved (wide) and peak allocated (narrow) per setting"))
        except plots.TooManyToDraw as e:
            doc.missing.append(f"the what-if plot: {e}")
        section.tables.append(what_if_table(r))
        doc.sections.append(section)
    else:
        doc.missing.append("the what-if table: the replay was run without --what-if")
    return doc


def default_out(path: pathlib.Path) -> pathlib.Path:
    """Where the page goes without -o: a folder beside the file (replay.json -> replay-page/)."""
    return path.parent / f"{path.stem}-page"


def render_replay(path: pathlib.Path, out: pathlib.Path | None = None) -> pathlib.Path:
    """The replay's page in `out`: index.html, summary.md, plots/. The document is read and checked
    before anything is written. Returns the folder."""
    replay = read_replay(path)
    out = make_folder(out or default_out(path))
    return write_page(build(replay, out), out)
