"""`trainmem plan --json FILE` -> a page of its own: index.html, summary.md and plots/plan-memory-time.png.

A plan document is what `trainmem plan` writes: the model, the device, the world size, the global
batch and sequence, how the search went, and the configurations it found, `candidates` (those
that fit, best first: the fastest predicted step first; exactly one "chosen") and `not_fitting`
(each with its reason; its predicted figures may be null or absent). The page shows:

  - a header: model, device, world size, global batch, sequence length, the search's size and time,
    the chosen configuration and its command;
  - the memory-time plot (plots.plan_scatter): peak reserved per rank against the predicted step
    time, the device's capacity, the Pareto front of those that fit, the chosen one labelled;
  - a table of the candidates in the plan's order (rank, flags, micro-batch x accumulation, step,
    tokens/s, peak reserved and allocated, on the Pareto front or not), the chosen marked, and one of
    those that do not fit with their reasons.

The document is checked whole before anything is written (check_plan): a file that is not a plan,
lacks a key the page needs, has a value of the wrong type, or has no candidate is a PlanError
naming the file and the key; the command line prints it in one line and exits 2. A configuration's
predicted figure that is a number but not one a prediction can be (NaN, infinite, negative, above
2^62) is named at the top of the page and shown as "-"; a configuration left without its step time
or peak reserved stays in the tables, out of the plot and the Pareto front. Each file is then
written whole or not at all (output_file.write_file), as the folder report's are.
"""
from __future__ import annotations

import pathlib
from dataclasses import dataclass, field
from typing import Sequence

from . import plots
from .document import Document, Figure, Section, Table
from .errors import InputError
from .input_file import read_json
from .output_file import make_folder
from .page import write_page
from .result_schema import PEAK_ALLOCATED, PEAK_RESERVED
from .results import finite_number

GiB = 2.0**30
# The largest predicted figure the page shows: trainmem bounds every size it computes by 2^62 bytes
# (suites/trainmem/README.md), and no step time in ms or rate per second of a plan comes near it. A
# larger one (1e308) is a broken prediction, and would overflow the plot's axes.
LARGEST_PREDICTION = 2.0**62
PLOT_NAME = "plan-memory-time.png"
# The parts of a predicted step time (a candidate's "time_ms"), in the order the header lists them.
TIME_PARTS = ("compute", "memory", "communication", "exposed_communication", "offload", "host")


class PlanError(InputError):
    """The file is not a plan document the page can show; the message says which key and why."""


@dataclass
class Configuration:
    """One configuration of a plan: a candidate (fits) or one that does not fit (with its reason)."""
    where: str                    # "candidates[0]", "not_fitting[1]": where it is in the document
    flags: str
    fits: bool
    micro_batch: int | None
    accumulation: int | None      # micro-batches per step
    step_ms: float | None
    tokens_per_s: float | None
    reserved_bytes: float | None
    allocated_bytes: float | None
    command: str = ""
    describe: str = ""
    chosen: bool = False
    reason: str = ""
    time_ms: dict[str, float] = field(default_factory=dict)
    on_front: bool = False        # set by Plan: a candidate no other candidate is both faster and smaller than


@dataclass
class Plan:
    source: str                   # the file's name
    model: dict
    device: dict
    world_size: int
    gpus_per_node: int | None
    global_batch: int
    seq: int
    search: dict
    candidates: list[Configuration]
    not_fitting: list[Configuration]
    bad: list[str] = field(default_factory=list)  # the predictions left out, each named ("<file>: <key> is ...")

    @property
    def chosen(self) -> Configuration:
        return next(c for c in self.candidates if c.chosen)


def pareto_front(points: Sequence[tuple[float, float]]) -> list[bool]:
    """For each (time, memory) point, whether it is on the Pareto front: no other point is at least as
    fast and at least as small, and strictly better in one of the two. Points equal in both are
    either both on it or both off it. O(n log n): sorted by time, each group of equal times against
    the smallest memory of all strictly faster points."""
    order = sorted(range(len(points)), key=lambda i: points[i])
    on = [False] * len(points)
    best = float("inf")  # the smallest memory of the points strictly faster than the current group
    i = 0
    while i < len(order):
        j = i
        while j < len(order) and points[order[j]][0] == points[order[i]][0]:
            j += 1
        smallest = points[order[i]][1]  # the group is sorted by memory too
        if smallest < best:
            for k in order[i:j]:
                on[k] = points[k][1] == smallest
            best = smallest
        i = j
    return on


# --- checking the document ---------------------------------------------------------------------------

def _type_name(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


class _Checker:
    """Reads the document's values, each checked; the first that is wrong raises PlanError naming the
    file and the key ("plan.json: candidates[2].predicted_step_ms is missing")."""

    def __init__(self, source: str):
        self.source = source
        self.bad: list[str] = []  # the predictions left out (prediction()), each named

    def error(self, text: str) -> PlanError:
        return PlanError(f"{self.source}: {text}")

    def get(self, obj: dict, key: str, where: str, required: bool):
        name = f"{where}.{key}" if where else key
        if key not in obj or obj[key] is None:
            if required:
                raise self.error(f"{name} is missing" if key not in obj else f"{name} is null")
            return name, None
        return name, obj[key]

    def object(self, obj: dict, key: str, where: str = "", required: bool = True) -> dict:
        name, value = self.get(obj, key, where, required)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error(f"{name} is {_type_name(value)}, not an object")
        return value

    def text(self, obj: dict, key: str, where: str = "", required: bool = True) -> str:
        name, value = self.get(obj, key, where, required)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.error(f"{name} is {_type_name(value)}, not a string")
        return value

    def number(self, obj: dict, key: str, where: str = "", required: bool = True, positive: bool = False) -> float | None:
        name, value = self.get(obj, key, where, required)
        if value is None:
            return None
        x = finite_number(value)
        if x is None:
            raise self.error(f"{name} is {value!r}, not a finite number" if isinstance(value, (int, float))
                             and not isinstance(value, bool) else f"{name} is {_type_name(value)}, not a number")
        if x < 0 or (positive and x == 0):
            raise self.error(f"{name} is {value!r}, not a {'positive' if positive else 'non-negative'} number")
        return x

    def prediction(self, obj: dict, key: str, where: str, required: bool) -> float | None:
        """A configuration's predicted figure: a number (else PlanError, as number()). One that is not a
        prediction (not finite, negative, above LARGEST_PREDICTION) is named in self.bad and left out (None):
        one bad value does not hide the rest of the plan."""
        name, value = self.get(obj, key, where, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(f"{name} is {_type_name(value)}, not a number")
        x = finite_number(value)
        if x is None or not 0 <= x <= LARGEST_PREDICTION:
            shown = "too large for a float" if x is None and isinstance(value, int) else f"{value:g}"
            self.bad.append(f"{self.source}: {name} is {shown}: not a prediction (a number from 0 to 2^62): shown as -")
            return None
        return x

    def count(self, obj: dict, key: str, where: str = "", required: bool = True) -> int | None:
        name, value = self.get(obj, key, where, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.error(f"{name} is {value!r}, not a whole number of at least 1")
        return value

    def flag(self, obj: dict, key: str, where: str, default: bool) -> bool:
        name, value = self.get(obj, key, where, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(f"{name} is {value!r}, not true or false")
        return value

    def configuration(self, obj: object, where: str, fits: bool) -> Configuration:
        if not isinstance(obj, dict):
            raise self.error(f"{where} is {_type_name(obj)}, not an object")
        if self.flag(obj, "fits", where, fits) != fits:
            raise self.error(f"{where}.fits is {str(not fits).lower()}: "
                             + ("candidates are the configurations that fit" if fits else
                                "not_fitting holds the configurations that do not fit"))
        time_ms = {}
        for key, value in self.object(obj, "time_ms", where, required=False).items():
            x = self.prediction({key: value}, key, f"{where}.time_ms", required=False)
            if x is not None:
                time_ms[key] = x
        chosen = self.flag(obj, "chosen", where, False)
        if chosen and not fits:
            raise self.error(f"{where}.chosen is true, but it does not fit")
        return Configuration(
            where=where, flags=self.text(obj, "flags", where), fits=fits,
            micro_batch=self.count(obj, "micro_batch", where, required=fits),
            accumulation=self.count(obj, "accumulation", where, required=fits),
            step_ms=self.prediction(obj, "predicted_step_ms", where, required=fits),
            tokens_per_s=self.prediction(obj, "predicted_tokens_per_s", where, required=False),
            reserved_bytes=self.prediction(obj, PEAK_RESERVED, where, required=fits),
            allocated_bytes=self.prediction(obj, PEAK_ALLOCATED, where, required=fits),
            command=self.text(obj, "command", where, required=False),
            describe=self.text(obj, "describe", where, required=False),
            chosen=chosen, reason=self.text(obj, "reason", where, required=not fits), time_ms=time_ms)



def check_plan(data: object, source: str = "plan") -> Plan:
    """The plan in `data` (a parsed `trainmem plan --json` document), checked; PlanError otherwise.
    Required: "command": "plan", model.name, device.name, device.capacity_bytes, world_size,
    global_batch, seq, search.seconds, and a non-empty list of candidates, each with flags,
    micro_batch, accumulation, predicted_step_ms, peak_reserved_bytes and peak_allocated_bytes, exactly
    one of them "chosen"; each of not_fitting (optional) with flags and a reason. Every other field
    is optional; any field present has to have its type."""
    c = _Checker(source)
    if not isinstance(data, dict):
        raise c.error(f"not a plan document (`trainmem plan --json`): {_type_name(data)}, not an object")
    if data.get("command") != "plan":
        raise c.error("not a plan document (`trainmem plan --json`): "
                      + ("no 'command'" if "command" not in data else f"'command' is {data['command']!r}, not 'plan'"))
    model, device, search = c.object(data, "model"), c.object(data, "device"), c.object(data, "search")
    c.text(model, "name", "model")
    c.number(model, "parameters", "model", required=False)
    c.text(model, "family", "model", required=False)
    c.text(device, "name", "device")
    c.text(device, "description", "device", required=False)
    c.number(device, "capacity_bytes", "device", positive=True)
    c.number(search, "seconds", "search")
    c.number(search, "configurations", "search", required=False)
    c.number(search, "meta_runs", "search", required=False)
    _, candidates = c.get(data, "candidates", "", True)
    if not isinstance(candidates, list):
        raise c.error(f"candidates is {_type_name(candidates)}, not a list")
    if not candidates:
        raise c.error("candidates is empty: the search found no configuration that fits, nothing to show")
    _, not_fitting = c.get(data, "not_fitting", "", False)
    not_fitting = [] if not_fitting is None else not_fitting
    if not isinstance(not_fitting, list):
        raise c.error(f"not_fitting is {_type_name(not_fitting)}, not a list")
    plan = Plan(source=source, model=model, device=device, world_size=c.count(data, "world_size"),
                gpus_per_node=c.count(data, "gpus_per_node", required=False),
                global_batch=c.count(data, "global_batch"), seq=c.count(data, "seq"), search=search,
                candidates=[c.configuration(x, f"candidates[{i}]", True) for i, x in enumerate(candidates)],
                not_fitting=[c.configuration(x, f"not_fitting[{i}]", False) for i, x in enumerate(not_fitting)],
                bad=c.bad)
    chosen = [x.where for x in plan.candidates if x.chosen]
    if len(chosen) != 1:
        raise c.error("no candidate is chosen (one has \"chosen\": true)" if not chosen else
                      f"{len(chosen)} candidates are chosen ({', '.join(chosen)}): one is")
    drawn = [x for x in plan.candidates if in_plot(x)]
    for x, on in zip(drawn, pareto_front([(x.step_ms, x.reserved_bytes) for x in drawn])):
        x.on_front = on
    return plan


def in_plot(x: Configuration) -> bool:
    """Whether the configuration has the two figures the plot (and the Pareto front) place it by."""
    return x.step_ms is not None and x.reserved_bytes is not None


def read_plan(path: pathlib.Path) -> Plan:
    """The plan in the file at `path`; InputError if it cannot be read or is not JSON, PlanError if
    it is not a plan document."""
    return check_plan(read_json(path), path.name)


# --- the page ----------------------------------------------------------------------------------------

def gib(b: float | None) -> str:
    return "-" if b is None else f"{b / GiB:.2f}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _batches(x: Configuration) -> str:
    return "-" if x.micro_batch is None else f"{x.micro_batch} × {x.accumulation or '?'}"


def _count(x: float | None) -> str:
    return f"{x:,.0f}" if x is not None else "?"


def header(plan: Plan) -> list[str]:
    m, d, s = plan.model, plan.device, plan.search
    about = [m["family"]] if m.get("family") else []
    about += [f"{m['parameters']:,.0f} parameters"] if m.get("parameters") is not None else []
    model = m["name"] + (f" ({', '.join(about)})" if about else "")
    device = d["name"] + (f", {d['description']}" if d.get("description") else "") + \
        f": {d['capacity_bytes'] / GiB:.2f} GiB per rank"
    ranks = f"world size {plan.world_size}" + (f" ({plan.gpus_per_node} per node)" if plan.gpus_per_node else "")
    searched = (f"{_count(s.get('configurations'))} configurations" if s.get("configurations") is not None else
                "the configurations") + (f" ({_count(s['meta_runs'])} meta runs)" if s.get("meta_runs") is not None else "")
    lines = [f"Model: {model}. Device: {device}. {ranks[0].upper() + ranks[1:]}; global batch {plan.global_batch} "
             f"sequences of {plan.seq} tokens.",
             f"The search: {searched} in {s['seconds']:.1f} s; {len(plan.candidates)} fit, "
             f"{len(plan.not_fitting)} listed as not fitting. Plan file: {plan.source}."]
    chosen = plan.chosen
    rank = plan.candidates.index(chosen) + 1
    line = (f"Chosen (rank {rank}): {chosen.flags}: predicted {_ms(chosen.step_ms)} ms per step"
            + (f", {_rate(chosen.tokens_per_s)} tokens/s" if chosen.tokens_per_s is not None else "")
            + f", peak reserved {gib(chosen.reserved_bytes)} GiB per rank of {gib(d['capacity_bytes'])} GiB.")
    parts = [(k, chosen.time_ms[k]) for k in TIME_PARTS if chosen.time_ms.get(k)] + \
        [(k, v) for k, v in chosen.time_ms.items() if k not in TIME_PARTS and v]
    if parts:
        line += " Its predicted time: " + ", ".join(f"{k.replace('_', ' ')} {v:.1f} ms" for k, v in parts) + "."
    if chosen.command:
        line += f" Command: {chosen.command}"
    return lines + [line]


def candidates_table(plan: Plan) -> Table:
    rows = [[str(i), "chosen" if x.chosen else "", x.flags, _batches(x), _ms(x.step_ms), _rate(x.tokens_per_s),
             gib(x.reserved_bytes), gib(x.allocated_bytes), "yes" if x.on_front else "no"]
            for i, x in enumerate(plan.candidates, 1)]
    return Table(["rank", "chosen", "flags", "micro-batch × accumulation", "predicted step (ms)", "tokens/s",
                  "peak reserved (GiB)", "peak allocated (GiB)", "Pareto"], rows,
                 caption="The configurations that fit, best first (the plan's order: the fastest predicted step). "
                         "Pareto: no other that fits is both faster and smaller in peak reserved.")


def not_fitting_table(plan: Plan) -> Table:
    rows = [[x.flags, _batches(x), _ms(x.step_ms), _rate(x.tokens_per_s), gib(x.reserved_bytes),
             gib(x.allocated_bytes), x.reason] for x in plan.not_fitting]
    return Table(["flags", "micro-batch × accumulation", "predicted step (ms)", "tokens/s", "peak reserved (GiB)",
                  "peak allocated (GiB)", "why it does not fit"], rows,
                 caption="Configurations that do not fit (- where the plan made no prediction)")


def plot_points(plan: Plan) -> list[plots.PlanPoint]:
    points = [plots.PlanPoint(x.step_ms, x.reserved_bytes, True, x.on_front, x.chosen,
                              x.flags if x.chosen else f"#{i}" if x.on_front else "")
              for i, x in enumerate(plan.candidates, 1) if in_plot(x)]
    return points + [plots.PlanPoint(x.step_ms, x.reserved_bytes, False) for x in plan.not_fitting if in_plot(x)]


def build(plan: Plan, out: pathlib.Path) -> Document:
    """The page's Document, and its plot written to out/plots/."""
    title = f"{plan.model['name']} on {plan.world_size} × {plan.device['name']}"
    doc = Document(f"trainmem plan: {title}", header(plan), missing_title="Not in the plot",
                   nothing_missing="Nothing: every configuration of the plan is in the plot.")
    doc.notice += plan.bad
    front = sum(x.on_front for x in plan.candidates)
    figure = plots.plan_scatter(plot_points(plan), plan.device["capacity_bytes"], f"{title}: predicted memory vs time",
                                out / "plots" / PLOT_NAME)
    doc.sections.append(Section("Memory vs time", [
        f"Each configuration's predicted peak reserved memory per rank against its predicted step time: filled "
        f"points fit, hollow grey ones do not; the dashed line is the device's capacity. The step line is the Pareto "
        f"front, {front} of the {len(plan.candidates)} that fit (numbered by rank): no other that fits is both faster "
        "and smaller. The star is the chosen one."], figures=[Figure(figure, f"{title}: memory vs time")]))
    section = Section("Candidates", tables=[candidates_table(plan)])
    if plan.not_fitting:
        section.tables.append(not_fitting_table(plan))
    else:
        section.paragraphs.append("The plan lists no configuration that does not fit.")
    doc.sections.append(section)
    for x in plan.candidates + plan.not_fitting:
        lacks = [what for what, v in (("predicted step time", x.step_ms), ("peak reserved", x.reserved_bytes))
                 if v is None]
        if lacks:
            doc.missing.append(f"{x.where} ({x.flags}): no {' and no '.join(lacks)}")
    return doc


def default_out(path: pathlib.Path) -> pathlib.Path:
    """Where the page goes without -o: a folder beside the plan, named after it (plan.json -> plan-page/)."""
    return path.parent / f"{path.stem}-page"


def render_plan(path: pathlib.Path, out: pathlib.Path | None = None) -> pathlib.Path:
    """The plan's page in `out`: index.html, summary.md, plots/plan-memory-time.png. The plan is
    read and checked before anything is written. Returns the folder."""
    plan = read_plan(path)
    out = make_folder(out or default_out(path))
    return write_page(build(plan, out), out)
