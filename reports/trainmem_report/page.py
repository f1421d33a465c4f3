"""A Document written as a page: index.html and summary.md in one folder (the same document, so
the two never disagree), each file whole or not at all."""
from __future__ import annotations

import pathlib

from . import html, markdown
from .document import Document


def write_page(doc: Document, out: pathlib.Path) -> pathlib.Path:
    html.write(doc, out / "index.html")
    markdown.write(doc, out / "summary.md")
    return out
