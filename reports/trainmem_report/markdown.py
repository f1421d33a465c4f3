"""Document -> summary.md (GitHub-flavoured Markdown; plots linked as files next to it)."""
from __future__ import annotations

import os
import pathlib

from .document import Document, Table
from .output_file import write_file


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table_md(t: Table) -> list[str]:
    lines = []
    if t.caption:
        lines.append(f"*{t.caption}*\n")
    lines.append("| " + " | ".join(_cell(c) for c in t.columns) + " |")
    lines.append("|" + "---|" * len(t.columns))
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows]
    return lines + [""]


def write(doc: Document, path: pathlib.Path) -> pathlib.Path:
    here = path.parent
    rel = lambda p: pathlib.Path(os.path.relpath(p, here)).as_posix()
    lines = [f"# {doc.title}", ""] + [p + "\n" for p in doc.intro]
    for s in doc.sections:
        lines += [f"## {s.title}", ""] + [p + "\n" for p in s.paragraphs]
        for t in s.tables:
            lines += table_md(t)
        lines += [f"![{f.caption}]({rel(f.path)})\n" for f in s.figures]
        if s.links:
            lines += ["Files: " + ", ".join(f"[{text}]({rel(p)})" for text, p in s.links
                                            if pathlib.Path(p).exists()), ""]
    lines += ["## Missing from these results", ""]
    lines += [f"- {m}" for m in doc.missing] or ["Nothing: every suite and run the report knows is here."]
    return write_file(path, lambda p: p.write_text("\n".join(lines) + "\n"))
