"""Document -> summary.md (GitHub-flavoured Markdown; plots linked as files next to it).

The Document holds plain text, much of it from the result files (benchmark names, labels, the
device's name, file and folder names), so every text is escaped: shown as written, never read as
Markdown or HTML. A `<script>` in a benchmark's name stays text, a `[x](http://...)` or
`![x](http://...)` makes no link and no image (an image would be fetched from a network), a `|`
does not split a table cell.
"""
from __future__ import annotations

import os
import pathlib
import re
import urllib.parse

from .document import Document, Table
from .output_file import write_file

# Characters that make Markdown (CommonMark and GitHub's tables and strikethrough) anywhere in a
# line: written with a backslash, which CommonMark allows before any ASCII punctuation.
_INLINE = re.compile(r"[\\`*\[\]<>&|~!#]")
# An underscore run between two letters or digits never makes emphasis (CommonMark's intraword
# rule), so it stays as it is: peak_allocated_bytes reads as written. Any other one is escaped.
_UNDERSCORES = re.compile(r"_+")
# What makes a block (heading, list, quote, setext underline) at the start of a line.
_BLOCK_START = re.compile(r"^([#>+=-]|\d+(?=[.)]))")


def _underscores(m: re.Match) -> str:
    text, start, end = m.string, m.start(), m.end()
    intraword = start > 0 and text[start - 1].isalnum() and end < len(text) and text[end].isalnum()
    return m.group() if intraword else "\\_" * len(m.group())


def escape(text: object) -> str:
    """`text` as Markdown that shows it as written, on one line, where a line is already begun
    (a table cell, a heading, a caption)."""
    text = " ".join(str(text).splitlines())
    text = _INLINE.sub(lambda m: "\\" + m.group(), text)
    return _UNDERSCORES.sub(_underscores, text)


def escape_line(text: object) -> str:
    """escape(text), for the start of a line or of a list item, where a leading "#", "-", "1." or
    indentation would make a block (a heading, a list, a code block)."""
    return _BLOCK_START.sub(lambda m: m.group() + "\\" if m.group()[0].isdigit() else "\\" + m.group(),
                            escape(text).lstrip())


def table_md(t: Table) -> list[str]:
    lines = []
    if t.caption:
        lines.append(f"*{escape(t.caption)}*\n")
    lines.append("| " + " | ".join(escape(c) for c in t.columns) + " |")
    lines.append("|" + "---|" * len(t.columns))
    lines += ["| " + " | ".join(escape(c) for c in row) + " |" for row in t.rows]
    return lines + [""]


def write(doc: Document, path: pathlib.Path) -> pathlib.Path:
    here = path.parent
    # a link's target: the file's path relative to summary.md, percent-encoded (spaces, parentheses)
    rel = lambda p: urllib.parse.quote(pathlib.Path(os.path.relpath(p, here)).as_posix())
    lines = [f"# {escape(doc.title)}", ""] + [f"> {escape(p)}\n" for p in doc.notice]
    lines += [escape_line(p) + "\n" for p in doc.intro]
    for s in doc.sections:
        lines += [f"## {escape(s.title)}", ""] + [escape_line(p) + "\n" for p in s.paragraphs]
        for t in s.tables:
            lines += table_md(t)
        lines += [f"![{escape(f.caption)}]({rel(f.path)})\n" for f in s.figures]
        if s.links:
            lines += ["Files: " + ", ".join(f"[{escape(text)}]({rel(p)})" for text, p in s.links
                                            if pathlib.Path(p).exists()), ""]
    lines += [f"## {escape(doc.missing_title)}", ""]
    lines += [f"- {escape_line(m)}" for m in doc.missing] or [escape_line(doc.nothing_missing)]
    return write_file(path, lambda p: p.write_text("\n".join(lines) + "\n"))
