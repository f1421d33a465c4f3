"""The report's page for suites/gradient_memory, from the committed fixture's bench_gradient_memory.json
(a real run, as `ci/suite --quick` runs it: --benchmark_min_time=0.01): a row per mode with the JSON's
figures, each mode against persistent gradients, the technique and its formula; every mode the benchmark
runs (persistent, on-demand, in-backward) is shown, and one it may add later like the others."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import FIXTURE, cases, section_tables
from reports.trainmem_report.__main__ import main

SECTION = "Gradient memory (bench_gradient_memory)"
MiB = 2**20


def mib(b: float) -> str:
    return f"{b / MiB:.2f} MiB"


def entries() -> list[dict]:
    """The fixture's cases (each its median over the repetitions), named by the case."""
    return [dict(e, name=e.get("run_name", e["name"]).removesuffix("/real_time"))
            for e in cases(json.loads((FIXTURE / "bench_gradient_memory.json").read_text())["benchmarks"])]


def render(folder, benchmarks: list[dict]) -> tuple[str, list]:
    shutil.copy(FIXTURE / "device.json", folder)
    data = json.loads((FIXTURE / "bench_gradient_memory.json").read_text())
    (folder / "bench_gradient_memory.json").write_text(json.dumps({**data, "benchmarks": benchmarks}))
    assert main(["render", str(folder)]) == 0
    summary = (folder / "summary.md").read_text()
    return summary, section_tables(summary, SECTION)


def check(benchmarks: list[dict], tables: list) -> None:
    """The main table's row per benchmark, and each non-persistent mode against persistent."""
    (header, rows), (against_header, against) = tables[0], tables[1]
    assert [r[header.index("setting")] for r in rows] == [e["name"].split("/")[-1] for e in benchmarks]
    for e, row in zip(benchmarks, rows):
        cell = dict(zip(header, row))
        assert cell["group"] == "small B=4"
        for column, key in (("peak allocated", "peak_allocated_bytes"), ("gradients peak", "gradients_peak_bytes"),
                            ("held between steps", "held_between_steps_bytes")):
            assert cell[column] == mib(e[key]), column
    base = next(e for e in benchmarks if e["name"].endswith("/persistent"))
    others = [e for e in benchmarks if e is not base]
    assert len(against) == len(others)
    for e, row in zip(others, against):
        cell = dict(zip(against_header, row))
        assert cell["mode"] == e["name"].split("/")[-1]
        assert cell["peak allocated saved"] == mib(base["peak_allocated_bytes"] - e["peak_allocated_bytes"])
        assert cell["held between steps saved"] == mib(base["held_between_steps_bytes"] - e["held_between_steps_bytes"])
        assert cell["G (all gradients)"] == mib(base["gradients_peak_bytes"])
        assert cell["time / persistent's"] == f"{e['real_time'] / base['real_time']:.2f}"


def test_every_mode_and_its_saving_against_persistent(tmp_path):
    benchmarks = entries()
    assert [e["name"] for e in benchmarks] == ["BM_Grads/small/persistent", "BM_Grads/small/on-demand",
                                               "BM_Grads/small/in-backward"]
    summary, tables = render(tmp_path, benchmarks)
    check(benchmarks, tables)
    # what the real run shows: on demand, every gradient's bytes are gone between steps (G)
    on_demand = tables[1][1][0]
    assert on_demand[1] == "on-demand" and on_demand[3] == on_demand[4]
    assert "peak = persistent's peak - G + round(wte's gradient)" in summary
    for plot in ("gradient_memory-tradeoff.png", "gradient_memory-categories-small-b-4.png"):
        assert (tmp_path / "plots" / plot).stat().st_size > 2000


def test_the_fused_update_holds_the_fewest_gradients(tmp_path):
    """The real run's in-backward row: its gradients' peak below G (one layer's and the root's at a
    time), nothing held between steps beyond on-demand's."""
    benchmarks = entries()
    _, tables = render(tmp_path, benchmarks)
    by_name = {e["name"].split("/")[-1]: e for e in benchmarks}
    assert by_name["in-backward"]["gradients_peak_bytes"] < by_name["persistent"]["gradients_peak_bytes"]
    assert by_name["in-backward"]["held_between_steps_bytes"] == by_name["on-demand"]["held_between_steps_bytes"]
    assert tables[1][1][-1][1] == "in-backward"


def test_a_mode_the_benchmark_adds_is_shown_like_the_others(tmp_path):
    """A fourth mode (the on-demand entry relabelled; not a measured figure) gets a row like the others."""
    benchmarks = entries()
    added = dict(next(e for e in benchmarks if e["name"].endswith("/on-demand")))
    added.update(name="BM_Grads/small/another-mode", run_name="BM_Grads/small/another-mode",
                 label="small B=4 grads=another-mode")
    benchmarks.append(added)
    _, tables = render(tmp_path, benchmarks)
    check(benchmarks, tables)
    assert tables[1][1][-1][1] == "another-mode"


def test_a_name_without_a_label_is_still_split_into_model_and_mode(tmp_path):
    benchmarks = [dict(e, label="") for e in entries()]
    _, tables = render(tmp_path, benchmarks)
    header, rows = tables[0]
    assert [(r[0], r[1]) for r in rows] == [("small", "persistent"), ("small", "on-demand"), ("small", "in-backward")]
