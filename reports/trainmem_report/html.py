"""Document -> index.html: one self-contained page. Plots are inline (base64 PNG), styles are in
the page, nothing is fetched from a network; links point only at files next to the page (the
PNGs and the raw results), relative to it.
"""
from __future__ import annotations

import base64
import html
import os
import pathlib

from .document import Document, Table
from .output_file import write_file

STYLE = """
body { font-family: sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.2em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
td.holds { background: #e3f4e3; } td.fails { background: #fbe3e3; } td.none { color: #888; }
td.chosen { background: #fff0c2; font-weight: bold; }
figure { margin: 1em 0; } figcaption { font-size: 13px; color: #555; }
img { max-width: 100%; border: 1px solid #eee; }
.missing li { color: #a33; }
.notice { border: 2px solid #c80; background: #fff6e0; padding: 0.5em 1em; margin: 1em 0; }
.wide { overflow-x: auto; max-width: 100%; }
td { overflow-wrap: anywhere; }
"""
VERDICT_CLASS = {"holds": "holds", "does not hold": "fails", "not measured": "none",
                 "not resolved at this noise": "none", "not measurable on CPU": "none",
                 "chosen": "chosen"}  # a plan's chosen configuration (plan.py)


def _esc(text: object) -> str:
    return html.escape(str(text))


def table_html(t: Table) -> str:
    head = "".join(f"<th>{_esc(c)}</th>" for c in t.columns)
    rows = []
    for row in t.rows:
        cells = "".join(f'<td class="{VERDICT_CLASS.get(c, "")}">{_esc(c)}</td>' if c in VERDICT_CLASS
                        else f"<td>{_esc(c)}</td>" for c in row)
        rows.append(f"<tr>{cells}</tr>")
    caption = f"<caption>{_esc(t.caption)}</caption>" if t.caption else ""
    # in a scrolling box: a table wider than the page scrolls instead of spilling over it
    return f'<div class="wide"><table>{caption}<tr>{head}</tr>{"".join(rows)}</table></div>'


def figure_html(path: pathlib.Path, caption: str, href: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (f'<figure><img alt="{_esc(caption)}" src="data:image/png;base64,{data}">'
            f'<figcaption>{_esc(caption)} <a href="{_esc(href)}">PNG</a></figcaption></figure>')


def write(doc: Document, path: pathlib.Path) -> pathlib.Path:
    here = path.parent
    rel = lambda p: pathlib.Path(os.path.relpath(p, here)).as_posix()
    parts = [f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{_esc(doc.title)}</title>"
             f"<style>{STYLE}</style></head><body><h1>{_esc(doc.title)}</h1>"]
    parts += [f'<p class="notice">{_esc(p)}</p>' for p in doc.notice]
    parts += [f"<p>{_esc(p)}</p>" for p in doc.intro]
    parts.append("<ul>" + "".join(f'<li><a href="#s{i}">{_esc(s.title)}</a></li>' for i, s in enumerate(doc.sections))
                 + f'<li><a href="#missing">{_esc(doc.missing_title)}</a></li></ul>')
    for i, s in enumerate(doc.sections):
        parts.append(f'<h2 id="s{i}">{_esc(s.title)}</h2>')
        parts += [f"<p>{_esc(p)}</p>" for p in s.paragraphs]
        parts += [table_html(t) for t in s.tables]
        figures = [figure_html(f.path, f.caption, rel(f.path)) for f in s.figures]
        if s.figures_per_row > 1:
            width = 100 // s.figures_per_row
            figures = [f'<div style="display:inline-block;vertical-align:top;width:{width}%">{f}</div>' for f in figures]
        parts += figures
        if s.links:
            parts.append("<p>Files: " + ", ".join(f'<a href="{_esc(rel(p))}">{_esc(text)}</a>'
                                                  for text, p in s.links if pathlib.Path(p).exists()) + "</p>")
    items = "".join(f"<li>{_esc(m)}</li>" for m in doc.missing) or \
        f"<li style=\"color:#282\">{_esc(doc.nothing_missing)}</li>"
    parts.append(f'<h2 id="missing">{_esc(doc.missing_title)}</h2><ul class="missing">{items}</ul></body></html>')
    return write_file(path, lambda p: p.write_text("\n".join(parts)))
