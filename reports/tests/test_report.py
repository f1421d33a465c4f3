"""The report rendered from real results: every plot written, the HTML self-contained and its
links pointing at files that exist, the numbers in summary.md equal to the JSON's, the timeline
equal to the run's own figures."""
from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest

from conftest import REPO
from reports.trainmem_report import claims, timeline
from reports.trainmem_report.__main__ import main
from reports.trainmem_report.results import load_folder

MiB = 1024 * 1024
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
UNITS_MS = {"ms": 1.0, "µs": 1e-3, "ns": 1e-6}
UNITS_MS_JSON = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}  # Google Benchmark's time_unit
SECTION_BENCH = re.compile(r"^## .*\((bench_\w+)\)$")


@pytest.fixture(scope="session")
def rendered(results) -> pathlib.Path:
    assert main(["render", str(results)]) == 0
    return results


def md_tables(summary: str) -> dict[str, list[dict[str, str]]]:
    """bench name -> rows of the first table of its section, as {column: cell}."""
    tables, bench, header = {}, None, None
    for line in summary.splitlines():
        m = SECTION_BENCH.match(line)
        if m:
            bench, header = m.group(1), None
        elif line.startswith("## "):
            bench = None
        elif not line.startswith("|"):
            header = None  # a table ends at the first line that is not a row
        elif bench and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            if header is None:
                header = cells
                if bench in tables:  # only the first table (the suite's own; then come claims)
                    bench = None
                    continue
                tables[bench] = []
            else:
                tables[bench].append(dict(zip(header, cells)))
    return tables


def bench_entries(folder: pathlib.Path, bench: str) -> list[dict]:
    """A suite's cases, read with the json module alone, from all its files in the order the report
    lists them (bench_zero.json (world size 1), then bench_zero-n2.json, -n4): per case its "median"
    aggregate with the "stddev" aggregate's real_time added as `stddev`, or its one entry when it
    ran once (no `stddev`), and the file's world size (its context's) as `world_size`."""
    files = [folder / f"{bench}.json"] + sorted(folder.glob(f"{bench}-n*.json"), key=lambda p: (len(p.name), p.name))
    cases = []
    for path in files:
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        entries, world_size = data["benchmarks"], int(data["context"].get("trainmem.world_size", "1"))
        aggregates = {(e["run_name"], e["aggregate_name"]): e for e in entries if e.get("run_type") == "aggregate"}
        seen = set()
        for e in entries:
            case = e.get("run_name", e["name"])
            if e.get("run_type") == "aggregate" or case in seen:
                continue
            seen.add(case)
            if (case, "median") in aggregates:
                stddev = aggregates.get((case, "stddev"))
                e = {**aggregates[(case, "median")], "stddev": stddev["real_time"] if stddev else None}
            cases.append({**e, "name": case, "world_size": world_size})
    return cases


def faster(a: dict, b: dict, factor: float = 1.0) -> bool | None:
    """reports/trainmem_report/noise.py's rule, written again here from its statement: a takes less
    than factor x b's time when the gap exceeds 2 combined standard deviations (3 repetitions at
    least); None when it does not."""
    if a.get("stddev") is None or b.get("stddev") is None or min(a["repetitions"], b["repetitions"]) < 3:
        return None
    stddev_ms = lambda e: e["stddev"] * UNITS_MS_JSON[e["time_unit"]]
    gap = factor * ms(b) - ms(a)
    spread = (stddev_ms(a) ** 2 + (factor * stddev_ms(b)) ** 2) ** 0.5
    return None if abs(gap) <= 2 * spread else gap > 0


def all_of(oks: list[bool | None]) -> bool | None:
    return False if False in oks else (None if None in oks else True)


def by_name(entries: list[dict]) -> dict[str, dict]:
    """Entries by name without Google Benchmark's run options ("/iterations:5/real_time")."""
    return {re.sub(r"(/iterations:\d+|/real_time)+$", "", e["name"]): e for e in entries}


def ms(entry: dict) -> float:
    return entry["real_time"] * UNITS_MS_JSON[entry["time_unit"]]


def verdict(rendered: pathlib.Path, claim_start: str) -> str:
    """The verdict summary.md's claims table gives the claim that starts with `claim_start`."""
    summary = (rendered / "summary.md").read_text()
    line = next(l for l in summary.splitlines() if l.startswith("| " + claim_start))
    return line.split(" | ")[1]


def expected(ok: bool | None) -> str:
    return "not resolved at this noise" if ok is None else ("holds" if ok else "does not hold")


def test_every_plot_is_a_non_empty_png(rendered):
    pngs = list((rendered / "plots").glob("*.png"))
    assert len(pngs) >= 8, sorted(p.name for p in pngs)
    for png in pngs:
        data = png.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 2000, png


def test_the_expected_plots_exist(rendered):
    names = {p.name for p in (rendered / "plots").glob("*.png")}
    for expected in ("memory-timeline.png", "checkpointing-tradeoff.png", "accumulation-tradeoff.png",
                     "mixed_precision-tradeoff.png", "attention-memory-fwd.png", "attention-tflops-fwd.png",
                     "attention-train-activations.png", "precision-loss.png", "zero-per-rank.png",
                     "fsdp-parameters-peak.png", "fsdp-peak-allocated.png", "allocator-alloc-cost.png",
                     "allocator-growingsequence.png", "allocator-growingwithkepttensors.png",
                     "allocator-reservedgrowth.png", "gradient_memory-tradeoff.png"):
        assert expected in names
    assert any(n.startswith("checkpointing-categories-") for n in names)


def test_html_is_self_contained_and_links_only_existing_files(rendered):
    page = (rendered / "index.html").read_text()
    assert "http://" not in page and "https://" not in page
    refs = re.findall(r'(?:src|href)="([^"]+)"', page)
    inline = [r for r in refs if r.startswith("data:image/png;base64,")]
    files = [r for r in refs if not r.startswith(("data:", "#"))]
    assert len(inline) >= 8
    assert files, "the page links its PNGs and raw results"
    for ref in files:
        assert (rendered / ref).is_file(), ref
    # every figure of summary.md is a file too
    for ref in re.findall(r"\]\(([^)]+)\)", (rendered / "summary.md").read_text()):
        assert (rendered / ref).is_file(), ref


def parse_bytes(cell: str) -> float:
    value, unit = cell.split()
    return float(value) * {"MiB": MiB, "GiB": 1024 * MiB}[unit]


def parse_ms(cell: str) -> float:
    value, unit = cell.split()
    return float(value) * UNITS_MS[unit]


def test_summary_numbers_equal_the_json(rendered):
    """Every time and byte cell of every suite table, against the Google Benchmark JSON read here
    with the json module alone (not the renderer's loader)."""
    tables = md_tables((rendered / "summary.md").read_text())
    assert {"bench_baseline", "bench_checkpointing", "bench_gradient_memory", "bench_mixed_precision",
            "bench_allocator", "bench_zero", "bench_fsdp"} <= set(tables)
    byte_columns = {"peak allocated": "peak_allocated_bytes", "peak reserved": "peak_reserved_bytes",
                    "activations peak": "activations_peak_bytes", "saved for backward": "saved_bytes"}
    checked = 0
    for bench, rows in tables.items():
        entries = bench_entries(rendered, bench)
        assert len(rows) == len(entries), bench
        for row, entry in zip(rows, entries):  # the table keeps the JSON's order
            ms = entry["real_time"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[entry["time_unit"]]
            shown = parse_ms(row["time / iteration"])
            assert shown == pytest.approx(ms, rel=0.01, abs=0.06 * UNITS_MS[row["time / iteration"].split()[1]])
            for column, key in byte_columns.items():
                if column in row and row[column] != "-":
                    assert parse_bytes(row[column]) == pytest.approx(entry[key], abs=0.006 * MiB), (bench, column)
                    checked += 1
    assert checked >= 20


def test_claim_verdicts_follow_from_the_json(rendered):
    """The checkpointing verdict recomputed here from the raw JSON matches the report's."""
    runs = by_name(bench_entries(rendered, "bench_checkpointing"))
    oks = []
    for name, none in runs.items():
        if name.endswith("/none") and name[:-4] + "full" in runs:
            full = runs[name[:-4] + "full"]
            saving = 1 - full["peak_allocated_bytes"] / none["peak_allocated_bytes"]
            oks.append(all_of([saving >= 0.30, faster(full, none, 1.30)]))
    assert oks
    assert verdict(rendered, "Activation checkpointing saves 30-50%") == expected(all_of(oks))


def test_allocator_claims_follow_from_the_json(rendered):
    """Each allocator claim's verdict, recomputed here from bench_allocator.json by its criterion."""
    runs = by_name(bench_entries(rendered, "bench_allocator"))
    speedups = [ms(runs[f"BM_AllocFree/raw/{size}"]) / ms(hit) for name, hit in runs.items()
                for size in [name.rsplit("/", 1)[-1]]
                if name.startswith("BM_AllocFree/hit/fixed/") and "touch" not in name]
    assert speedups
    oks = [faster(hit, runs[f"BM_AllocFree/raw/{name.rsplit('/', 1)[-1]}"], 0.5) for name, hit in runs.items()
           if name.startswith("BM_AllocFree/hit/fixed/") and "touch" not in name]
    assert verdict(rendered, "Caching exists") == expected(all_of(oks))

    frag = lambda e: e["peak_reserved_bytes"] / e["peak_allocated_bytes"]
    oks = []
    for segments in ("fixed", "expandable"):
        never, every = runs.get(f"BM_TrainEmptyCache/{segments}/never"), runs.get(f"BM_TrainEmptyCache/{segments}/every-step")
        if never and every:
            oks.append(all_of([frag(every) < frag(never), faster(every, never, 1.05)]))
    assert oks
    assert verdict(rendered, "Calling empty_cache() every step") == expected(all_of(oks))

    seq, kept = "BM_GrowingSequence/", "BM_GrowingWithKeptTensors/"
    ratio_at_oom = lambda e: e["reserved_at_oom_bytes"] / e["allocated_at_oom_bytes"]
    less_fragmented = (runs[seq + "expandable"]["reserved_over_allocated_at_peak"] <
                       runs[seq + "fixed"]["reserved_over_allocated_at_peak"] and
                       ratio_at_oom(runs[kept + "expandable"]) < ratio_at_oom(runs[kept + "fixed"]))
    assert verdict(rendered, "Expandable segments reduce fragmentation") == expected(less_fragmented)
    further = (runs[seq + "expandable"]["last_seq_trained"] > runs[seq + "fixed"]["last_seq_trained"] and
               runs[kept + "expandable"]["steps_before_oom"] > runs[kept + "fixed"]["steps_before_oom"])
    assert verdict(rendered, "Expandable segments let a growing workload") == expected(further)

    growth = {name.split("/")[1]: e["reserved_growth_bytes"] for name, e in runs.items()
              if name.startswith("BM_ReservedGrowth/")}
    assert {"leak", "no_leak"} <= set(growth)
    assert verdict(rendered, "Reserved memory that keeps growing") == \
        expected(all(g <= 0 for case, g in growth.items() if case != "leak"))


def test_zero_and_fsdp_claims_follow_from_the_json(rendered):
    """The ZeRO and FSDP verdicts, recomputed here from every world size's file."""
    states = lambda e: e["parameters_bytes"] + e["gradients_bytes"] + e["optimizer_state_bytes"]
    zero = {(int(e["stage"]), int(e["world_size"])): e for e in bench_entries(rendered, "bench_zero")
            if e["name"].split("/")[4] == "offload_none"}
    worlds = [n for s, n in zero if s == 3 and n > 1 and (0, n) in zero]
    assert worlds, "the results hold ZeRO at a world size > 1 (ci/suite runs bench_zero under mpirun)"
    assert verdict(rendered, "ZeRO-3 divides the model states") == \
        expected(all(states(zero[(0, n)]) / states(zero[(3, n)]) >= 0.8 * n for n in worlds))
    paper = lambda e: sum(e[f"paper_{c}_bytes"] for c in ("parameters", "gradients", "optimizer_state"))
    exact = lambda e: sum(e[f"predicted_{c}_bytes"] for c in ("parameters", "gradients", "optimizer_state"))
    assert verdict(rendered, "ZeRO's per-rank model states are") == \
        expected(all(abs(states(e) / paper(e) - 1) <= 0.01 and states(e) == exact(e) for e in zero.values()))

    oks = []
    for e in bench_entries(rendered, "bench_fsdp"):
        _, _, mode, unit, prefetch = e["name"].split("/")[:5]
        if mode == "full":
            units = 2 if prefetch == "prefetch" and unit != "4-layers" else 1  # small: 4 layers
            oks.append(e["parameters_peak_bytes"] == e["predicted_parameters_peak_bytes"] and
                       e["gathered_units_at_peak"] == units)
    assert oks
    assert verdict(rendered, "FSDP's peak is the shard plus") == expected(all(oks))


def test_timeline_replays_to_the_runs_own_peak(rendered):
    trace = json.loads((rendered / "memory-trace.json").read_text())
    run = json.loads((rendered / "train-baseline.json").read_text())
    assert timeline.peak_allocated(trace) == run["memory"]["peak_allocated_bytes"]
    t = timeline.step_timeline(trace)
    assert 1 <= t.step <= run["config"]["steps"]
    assert {p for p, _, _ in t.phases} >= {"forward", "backward", "optimizer"}
    # after the step's last event, what is allocated and reserved is what the run reports for it
    assert t.total()[-1] == run["steps"][t.step - 1]["allocated_bytes"]
    assert t.reserved[-1] == run["steps"][t.step - 1]["reserved_bytes"]
    for s in timeline.complete_steps(trace):  # and so for every step
        later = timeline.step_timeline(trace, s)
        assert later.total()[-1] == run["steps"][s - 1]["allocated_bytes"]


def test_every_claim_has_a_computed_verdict(rendered):
    folder = load_folder(rendered)
    verdicts = {c.claim: c.verdict for c in claims.evaluate(folder)}
    measured = [v for v in verdicts.values() if v != claims.NOT_MEASURED]
    assert len(measured) >= 17, verdicts
    assert set(measured) <= {claims.HOLDS, claims.FAILS, claims.NOT_RESOLVED, claims.NOT_MEASURABLE_ON_CPU}


def test_the_command_line_renders_and_converts(rendered, tmp_path):
    run = subprocess.run([sys.executable, "-m", "reports.trainmem_report", "pickle",
                          str(rendered / "memory-snapshot.json"), str(tmp_path / "s.pickle")],
                         cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "s.pickle").stat().st_size > 1000
