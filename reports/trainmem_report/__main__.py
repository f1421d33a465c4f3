"""Command line of the report renderer (run from the repository root):

  python3 -m reports.trainmem_report render reports/out/2026-11-21-cpu-amd-epyc
      -> index.html, summary.md and plots/ in that folder
  python3 -m reports.trainmem_report render DIR_A DIR_B [...] -o reports/out/compare
      -> the same, comparing the devices side by side
  python3 -m reports.trainmem_report pickle memory-snapshot.json memory-snapshot.pickle
      -> the file pytorch.org/memory_viz opens
  python3 -m reports.trainmem_report plan plan.json [-o DIR]
      -> a page for `trainmem plan --json plan.json`: index.html, summary.md and plots/ in DIR
         (default: plan-page/ beside the file)
  python3 -m reports.trainmem_report replay replay.json [-o DIR]
      -> a page for `trainmem replay SNAPSHOT --what-if --json > replay.json`: the snapshot's recorded
         and replayed timelines, its phases and the what-if bars (default: replay-page/ beside the file)
"""
from __future__ import annotations

import argparse
import pathlib
import sys

from . import compare, plan, replay_page, report
from .errors import InputError, OutputError
from .output_file import make_folder
from .page import write_page
from .results import load_folder
from .snapshot import snapshot_to_pickle


def render(dirs: list[pathlib.Path], out: pathlib.Path | None) -> int:
    folders = [load_folder(d) for d in dirs]  # InputError if one is not a folder
    if len(folders) == 1:
        out = make_folder(out or dirs[0])
        doc = report.build(folders[0], out)
    else:
        out = out or dirs[0].parent / ("compare-" + "-vs-".join(report.slug(d.name)[:24] for d in dirs))
        make_folder(out)
        doc = compare.build(folders, out)
    write_page(doc, out)
    print(f"trainmem report: {out / 'index.html'} and {out / 'summary.md'}")
    if doc.missing:
        print(f"trainmem report: {len(doc.missing)} thing(s) missing, listed at the end of the report:")
        for m in doc.missing:
            print(f"  - {m}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m reports.trainmem_report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("render", help="results folder(s) -> index.html, summary.md, plots/")
    r.add_argument("dirs", nargs="+", type=pathlib.Path, help="results folders (reports/out/<date>-<device>)")
    r.add_argument("-o", "--out", type=pathlib.Path, help="output folder (default: the folder itself, or "
                                                          "compare-<a>-vs-<b> beside the first)")
    p = sub.add_parser("pickle", help="memory-snapshot.json -> the pickle PyTorch's memory_viz opens")
    p.add_argument("snapshot", type=pathlib.Path)
    p.add_argument("output", type=pathlib.Path)
    q = sub.add_parser("plan", help="`trainmem plan --json` document -> index.html, summary.md, plots/")
    q.add_argument("plan", type=pathlib.Path, help="the file `trainmem plan --json FILE` wrote")
    q.add_argument("-o", "--out", type=pathlib.Path, help="output folder (default: <name>-page beside the file)")
    w = sub.add_parser("replay", help="`trainmem replay SNAPSHOT --json` document -> index.html, summary.md, plots/")
    w.add_argument("replay", type=pathlib.Path, help="what `trainmem replay SNAPSHOT --what-if --json` printed")
    w.add_argument("-o", "--out", type=pathlib.Path, help="output folder (default: <name>-page beside the file)")
    a = parser.parse_args(argv)
    try:
        if a.command == "render":
            return render(a.dirs, a.out)
        if a.command in ("plan", "replay"):
            out = plan.render_plan(a.plan, a.out) if a.command == "plan" else replay_page.render_replay(a.replay, a.out)
            print(f"trainmem report: {out / 'index.html'} and {out / 'summary.md'}")
            return 0
        print(f"trainmem report: wrote {snapshot_to_pickle(a.snapshot, a.output)}")
        return 0
    except InputError as e:  # a SnapshotError, a PlanError and a ReplayError too
        print(f"trainmem report: error: {e}", file=sys.stderr)
        return 2
    except OutputError as e:  # files already written stay whole: each is written whole or not at all
        print(f"trainmem report: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
