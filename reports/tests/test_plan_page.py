"""The page of a `trainmem plan --json` document (reports/trainmem_report/plan.py): its Pareto front
is the brute-force definition's, the chosen configuration is marked in the table and the plot, every
number in summary.md is the JSON's, the files are written whole, and a file that is not a plan
document is a one-line error naming what is wrong, with nothing written.

fixtures/plan_small.json is made by hand (no `trainmem plan` had run when it was written): gpt2-1.5b
on 8 H100s, 8 configurations that fit (two of them with equal predicted times, one dominated by
the other) and 2 that do not (one without a prediction).
"""
from __future__ import annotations

import copy
import json
import math
import pathlib
import random
import re
import subprocess
import sys

import matplotlib.figure
import matplotlib.pyplot as plt
import pytest

from conftest import REPO, md_text, section_tables
from reports.trainmem_report import plots
from reports.trainmem_report.__main__ import main
from reports.trainmem_report.plan import PLOT_NAME, PlanError, check_plan, default_out, pareto_front, plot_points

PLAN = REPO / "reports" / "tests" / "fixtures" / "plan_small.json"
GIB = 2.0**30


def plan_json() -> dict:
    return json.loads(PLAN.read_text())


def dominated(i: int, points: list[tuple[float, float]]) -> bool:
    """The definition: another point is at least as fast and as small, and better in one of the two."""
    t, m = points[i]
    return any(j != i and tj <= t and mj <= m and (tj < t or mj < m) for j, (tj, mj) in enumerate(points))


def brute_front(points: list[tuple[float, float]]) -> list[bool]:
    return [not dominated(i, points) for i in range(len(points))]


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("plan") / "page"
    assert main(["plan", str(PLAN), "-o", str(out)]) == 0
    return out


# --- the Pareto front ------------------------------------------------------------------------------

def test_the_front_of_the_fixture_is_the_definitions():
    candidates = plan_json()["candidates"]
    points = [(c["predicted_step_ms"], c["peak_reserved_bytes"]) for c in candidates]
    front = pareto_front(points)
    assert front == brute_front(points)
    # by hand: rank 3 is beaten by rank 2, rank 5 by rank 4 (the same time, less memory), rank 7 by rank 4
    assert [i for i, on in enumerate(front, 1) if on] == [1, 2, 4, 6, 8]


@pytest.mark.parametrize("seed", range(4))
def test_the_front_of_random_points_is_the_definitions(seed):
    rng = random.Random(seed)
    for _ in range(300):
        n = rng.randint(0, 25)
        grid = rng.choice([4, 10, 1000])  # a small grid: many ties in time, in memory, in both
        points = [(float(rng.randint(1, grid)), float(rng.randint(1, grid))) for _ in range(n)]
        assert pareto_front(points) == brute_front(points), points


def test_the_front_of_equal_points():
    assert pareto_front([]) == []
    assert pareto_front([(1.0, 1.0)]) == [True]
    assert pareto_front([(1.0, 1.0), (1.0, 1.0)]) == [True, True]  # neither beats the other
    assert pareto_front([(1.0, 2.0), (1.0, 1.0), (2.0, 1.0), (2.0, 0.5)]) == [False, True, False, True]


# --- the page --------------------------------------------------------------------------------------

def test_the_page_and_its_plot_are_written(page):
    assert sorted(p.relative_to(page).as_posix() for p in page.rglob("*")) == \
        ["index.html", "plots", f"plots/{PLOT_NAME}", "summary.md"]  # no temporary file left
    png = (page / "plots" / PLOT_NAME).read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    html = (page / "index.html").read_text()
    assert "data:image/png;base64," in html  # the plot is inline: the page stands alone
    hrefs = re.findall(r'(?:href|src)="([^"]*)"', html)
    for h in hrefs:
        assert not re.match(r"[a-z]+://", h), h  # nothing from a network
        if not h.startswith(("#", "data:")):
            assert (page / h).is_file(), h
    assert f"(plots/{PLOT_NAME})" in (page / "summary.md").read_text()


def test_the_header_says_what_was_planned(page):
    intro = md_text((page / "summary.md").read_text()).split("\n## ", 1)[0]
    assert intro.startswith("# trainmem plan: gpt2-1.5b on 8 × h100-80gb")
    for text in ("gpt2-1.5b (gpt, 1,557,611,200 parameters)", "NVIDIA H100 80GB HBM3 (SXM): 79.65 GiB per rank",
                 "World size 8 (8 per node)", "global batch 64 sequences of 1024 tokens",
                 "1,234 configurations (456 meta runs) in 3.2 s", "8 fit, 2 listed as not fitting",
                 "Chosen (rank 1): --batch 8 --precision bf16 --attention flash --zero 1",
                 "Command: mpirun -np 8 trainmem train --model gpt2-1.5b --batch 8"):
        assert text in intro, text


def gib(b: float) -> str:
    return f"{b / GIB:.2f}"


def test_the_candidates_table_is_the_json_best_first(page):
    doc = plan_json()
    [(header, rows), (header2, rows2)] = section_tables((page / "summary.md").read_text(), "Candidates")
    assert header == ["rank", "chosen", "flags", "micro-batch × accumulation", "predicted step (ms)", "tokens/s",
                      "peak reserved (GiB)", "peak allocated (GiB)", "Pareto"]
    points = [(c["predicted_step_ms"], c["peak_reserved_bytes"]) for c in doc["candidates"]]
    assert len(rows) == len(doc["candidates"])
    for i, (row, c) in enumerate(zip(rows, doc["candidates"])):
        assert row == [str(i + 1), "chosen" if c["chosen"] else "", c["flags"], f"{c['micro_batch']} × {c['accumulation']}",
                       f"{c['predicted_step_ms']:.1f}", f"{c['predicted_tokens_per_s']:,.0f}",
                       gib(c["peak_reserved_bytes"]), gib(c["peak_allocated_bytes"]),
                       "no" if dominated(i, points) else "yes"]
    assert [row[1] for row in rows] == ["chosen"] + [""] * (len(rows) - 1)
    assert [float(r[4]) for r in rows] == sorted(float(r[4]) for r in rows)  # best first
    # those that do not fit, below, with their reasons; "-" where no prediction was made
    assert header2[-1] == "why it does not fit"
    assert [[r[0], r[2], r[4], r[-1]] for r in rows2] == \
        [[c["flags"], "-" if c.get("predicted_step_ms") is None else f"{c['predicted_step_ms']:.1f}",
          gib(c["peak_reserved_bytes"]), c["reason"]] for c in doc["not_fitting"]]


def test_the_html_marks_the_chosen_row(page):
    html = (page / "index.html").read_text()
    rows = re.findall(r"<tr>(.*?)</tr>", html)
    marked = [r for r in rows if '<td class="chosen">chosen</td>' in r]
    assert len(marked) == 1 and "<td>--batch 8 --precision bf16 --attention flash --zero 1</td>" in marked[0]
    assert re.search(r"td\.chosen\s*{[^}]*background", html)


def test_what_is_not_in_the_plot_is_listed(page):
    summary = md_text((page / "summary.md").read_text())
    listed = summary.split("## Not in the plot\n", 1)[1]
    assert "not_fitting[1] (--batch 8 --precision fp32 --attention naive --zero 0): no predicted step time" in listed
    assert "not_fitting[0]" not in listed


def test_the_plot_shows_the_front_the_capacity_and_the_chosen():
    doc = plan_json()
    plan = check_plan(doc)
    fig = plots.plan_scatter_figure(plot_points(plan), doc["device"]["capacity_bytes"], "t")
    try:
        ax = fig.axes[0]
        lines = {line.get_label(): line for line in ax.get_lines()}
        capacity = next(line for label, line in lines.items() if label.startswith("device capacity"))
        assert list(capacity.get_ydata()) == pytest.approx([doc["device"]["capacity_bytes"] / GIB] * 2)
        front = lines["Pareto front (none both faster and smaller)"]
        assert front.get_drawstyle() == "steps-post"
        expected = sorted((c["predicted_step_ms"], c["peak_reserved_bytes"] / GIB) for i, c in enumerate(doc["candidates"])
                          if not dominated(i, [(x["predicted_step_ms"], x["peak_reserved_bytes"]) for x in doc["candidates"]]))
        assert list(front.get_xdata()) == pytest.approx([x for x, _ in expected])
        assert list(front.get_ydata()) == pytest.approx([y for _, y in expected])
        scatters = {c.get_label(): c.get_offsets() for c in ax.collections}
        chosen = doc["candidates"][0]
        assert scatters["chosen"].tolist()[0] == pytest.approx([chosen["predicted_step_ms"], chosen["peak_reserved_bytes"] / GIB])
        assert len(scatters["chosen"]) == 1
        assert len(scatters["fits"]) == len(doc["candidates"])
        assert len(scatters["does not fit"]) == 1  # the other has no predicted step time
        notes = [" ".join(t.get_text().split()) for t in ax.texts]
        assert chosen["flags"] in notes
        assert sorted(n for n in notes if n.startswith("#")) == ["#2", "#4", "#6", "#8"]  # the front, by rank
    finally:
        plt.close(fig)


def test_text_from_the_plan_is_shown_as_written(tmp_path):
    doc = plan_json()
    doc["candidates"][0]["flags"] = "--name <script>x</script> $ | *"  # a lone $ would break matplotlib's mathtext
    doc["model"]["name"] = "m$"
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    assert main(["plan", str(tmp_path / "plan.json"), "-o", str(tmp_path / "page")]) == 0
    html = (tmp_path / "page" / "index.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;x&lt;/script&gt; $ | *" in html
    [(_, rows), _] = section_tables((tmp_path / "page" / "summary.md").read_text(), "Candidates")
    assert rows[0][2] == "--name <script>x</script> $ | *"


def test_without_not_fitting_and_by_default_beside_the_file(tmp_path, capsys):
    doc = plan_json()
    del doc["not_fitting"]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    assert main(["plan", str(path)]) == 0
    out = default_out(path)
    assert out == tmp_path / "p-page"
    assert capsys.readouterr().out.strip() == f"trainmem report: {out / 'index.html'} and {out / 'summary.md'}"
    summary = (out / "summary.md").read_text()
    assert "The plan lists no configuration that does not fit." in summary
    assert "Nothing: every configuration of the plan is in the plot." in summary
    assert len(section_tables(summary, "Candidates")) == 1


# --- bad input -------------------------------------------------------------------------------------

def _set(path: str, value):
    """A change to the fixture: set (or, with value DELETE, delete) the key at a dotted path."""
    def change(doc):
        *parents, last = path.split(".")
        obj = doc
        for p in parents:
            obj = obj[int(p)] if isinstance(obj, list) else obj[p]
        if value is DELETE:
            del obj[int(last) if isinstance(obj, list) else last]
        else:
            obj[int(last) if isinstance(obj, list) else last] = value
        return doc
    return change


DELETE = object()

BAD = [
    (lambda d: [d], "not a plan document (`trainmem plan --json`): a list, not an object"),
    (_set("command", "train"), "not a plan document (`trainmem plan --json`): 'command' is 'train', not 'plan'"),
    (_set("command", DELETE), "not a plan document (`trainmem plan --json`): no 'command'"),
    (_set("candidates", DELETE), "candidates is missing"),
    (_set("candidates", []), "candidates is empty: the search found no configuration that fits, nothing to show"),
    (_set("candidates", {"a": 1}), "candidates is an object, not a list"),
    (_set("candidates.2.predicted_step_ms", DELETE), "candidates[2].predicted_step_ms is missing"),
    (_set("candidates.2.predicted_step_ms", None), "candidates[2].predicted_step_ms is null"),
    (_set("candidates.0.peak_reserved_bytes", "lots"), "candidates[0].peak_reserved_bytes is a string, not a number"),
    (_set("candidates.4.accumulation", 0), "candidates[4].accumulation is 0, not a whole number of at least 1"),
    (_set("candidates.1.flags", 7), "candidates[1].flags is a number, not a string"),
    (_set("candidates.1.fits", False), "candidates[1].fits is false: candidates are the configurations that fit"),
    (_set("candidates.3", "x"), "candidates[3] is a string, not an object"),
    (_set("candidates.3.chosen", True), "2 candidates are chosen (candidates[0], candidates[3]): one is"),
    (_set("candidates.0.chosen", False), "no candidate is chosen (one has \"chosen\": true)"),
    (_set("candidates.0.time_ms.compute", "slow"), "candidates[0].time_ms.compute is a string, not a number"),
    (_set("not_fitting.0.reason", DELETE), "not_fitting[0].reason is missing"),
    (_set("not_fitting.0.predicted_step_ms", "x"), "not_fitting[0].predicted_step_ms is a string, not a number"),
    (_set("not_fitting", "none"), "not_fitting is a string, not a list"),
    (_set("device.capacity_bytes", DELETE), "device.capacity_bytes is missing"),
    (_set("device.capacity_bytes", 0), "device.capacity_bytes is 0, not a positive number"),
    (_set("model", ["gpt2-1.5b"]), "model is a list, not an object"),
    (_set("model.name", DELETE), "model.name is missing"),
    (_set("world_size", 0), "world_size is 0, not a whole number of at least 1"),
    (_set("seq", True), "seq is True, not a whole number of at least 1"),
    (_set("search.seconds", -1), "search.seconds is -1, not a non-negative number"),
]


@pytest.mark.parametrize("change,message", BAD, ids=[m[:50] for _, m in BAD])
def test_a_bad_plan_is_a_one_line_error_and_writes_nothing(tmp_path, capsys, change, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(change(copy.deepcopy(plan_json()))))
    with pytest.raises(PlanError):
        check_plan(json.loads(path.read_text()), path.name)
    assert main(["plan", str(path), "-o", str(tmp_path / "page")]) == 2
    assert capsys.readouterr().err == f"trainmem report: error: bad.json: {message}\n"
    assert not (tmp_path / "page").exists()


@pytest.mark.parametrize("write,message", [
    (lambda p: p.write_text('{"command": "plan", "candidates": ['), "bad.json: unreadable, not JSON"),
    (lambda p: None, "bad.json: cannot be opened (No such file or directory)"),
    (lambda p: p.mkdir(), "bad.json: not a regular file (a folder): not read"),
])
def test_a_file_that_cannot_be_read_is_a_one_line_error(tmp_path, capsys, write, message):
    write(tmp_path / "bad.json")
    assert main(["plan", str(tmp_path / "bad.json"), "-o", str(tmp_path / "page")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"trainmem report: error: {message}") and err.count("\n") == 1
    assert not (tmp_path / "page").exists()


def test_the_command_line_shows_no_traceback(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps({"command": "plan", "model": {"name": "m"}}))
    run = subprocess.run([sys.executable, "-m", "reports.trainmem_report", "plan", str(tmp_path / "bad.json")],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr == "trainmem report: error: bad.json: device is missing\n"


# --- a bad prediction is named, the rest is shown (issue 40, item 19) ------------------------------

@pytest.mark.parametrize("value,shown", [(1e308, "1e+308"), (1.7e308, "1.7e+308"), (math.inf, "inf"), (math.nan, "nan"),
                                         (10**400, "too large for a float"), (-5, "-5")],
                         ids=["1e308", "1.7e308", "inf", "nan", "10**400", "-5"])
def test_a_prediction_the_page_cannot_show_is_named_and_the_rest_is_shown(tmp_path, value, shown):
    doc = plan_json()
    doc["candidates"][3]["predicted_step_ms"] = value
    doc["candidates"][5]["time_ms"]["compute"] = value
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    assert main(["plan", str(tmp_path / "plan.json"), "-o", str(tmp_path / "page")]) == 0
    summary = md_text((tmp_path / "page" / "summary.md").read_text())
    top = summary.split("\n## ", 1)[0]
    for name in ("candidates[3].predicted_step_ms", "candidates[5].time_ms.compute"):
        assert f"plan.json: {name} is {shown}: not a prediction (a number from 0 to 2^62): shown as -" in top
    [(_, rows), _] = section_tables((tmp_path / "page" / "summary.md").read_text(), "Candidates")
    assert len(rows) == len(doc["candidates"])
    assert rows[3][4] == "-" and rows[3][-1] == "no"  # no step time: not on the front
    assert rows[2][4] == f"{doc['candidates'][2]['predicted_step_ms']:.1f}"
    listed = summary.split("## Not in the plot\n", 1)[1]
    assert f"candidates[3] ({doc['candidates'][3]['flags']}): no predicted step time" in listed
    plan = check_plan(doc)
    # without rank 4, rank 5 is on the front (nothing faster is smaller), rank 7 is beaten by rank 6
    assert [x.on_front for x in plan.candidates] == [True, True, False, False, True, True, False, True]
    assert len(plot_points(plan)) == 8  # the 7 other candidates, and the one not fitting with a prediction
    assert (tmp_path / "page" / "plots" / PLOT_NAME).stat().st_size > 10_000


# --- whole or nothing ------------------------------------------------------------------------------

def test_an_output_folder_that_cannot_be_made_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "a-file").write_text("not a folder")
    out = tmp_path / "a-file" / "page"
    assert main(["plan", str(PLAN), "-o", str(out)]) == 1
    assert capsys.readouterr().err.strip() == f"trainmem report: error: cannot create the folder {out}: Not a directory"


def test_a_full_disk_keeps_the_earlier_page_whole(page, tmp_path, monkeypatch, capsys):
    out = tmp_path / "page"
    assert main(["plan", str(PLAN), "-o", str(out)]) == 0
    earlier = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full_disk)
    assert main(["plan", str(PLAN), "-o", str(out)]) == 1
    assert capsys.readouterr().err.strip() == \
        f"trainmem report: error: cannot write {out / 'plots' / PLOT_NAME}: No space left on device"
    monkeypatch.undo()
    monkeypatch.setattr(pathlib.Path, "write_text", full_disk)
    assert main(["plan", str(PLAN), "-o", str(out)]) == 1
    assert capsys.readouterr().err.strip() == f"trainmem report: error: cannot write {out / 'index.html'}: No space left on device"
    monkeypatch.undo()
    # every file as it was (the plot was rewritten whole with the same bytes), no temporary file
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == earlier
