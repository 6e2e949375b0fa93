"""Render a report - a list of blocks - as Markdown (images beside it) and as one self-contained HTML page
(images embedded as base64 data URIs).

Blocks: ``Heading(level, text)``, ``Para(text)``, ``TableBlock(headers, rows)``, ``Image(path, caption)``,
``Code(text)``, ``Details(summary, text)`` (a folded code block in HTML).
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence, Union


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class TableBlock:
    headers: Sequence[str]
    rows: Sequence[Sequence[str]]


@dataclass(frozen=True)
class Image:
    path: Path
    caption: str
    name: str  # file name under images/ in the Markdown version


@dataclass(frozen=True)
class Code:
    text: str


@dataclass(frozen=True)
class Details:
    summary: str
    text: str


Block = Union[Heading, Para, TableBlock, Image, Code, Details]

CSS = """body{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:.5rem 0 1.5rem}th,td{border:1px solid #ccc;padding:.25rem .5rem;
text-align:left;vertical-align:top}th{background:#f3f3f3}pre{background:#f6f6f6;padding:.5rem;overflow-x:auto}
figure{margin:1rem 0}img{max-width:100%}figcaption{color:#555;font-size:.9rem}"""


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", "<br>")


def _fence(text: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}\n{text.rstrip()}\n{fence}"


def to_markdown(blocks: Sequence[Block]) -> str:
    """Markdown; images are linked as ``images/<name>`` (the caller copies them there)."""
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"{'#' * block.level} {block.text}")
        elif isinstance(block, Para):
            out.append(block.text)
        elif isinstance(block, TableBlock):
            lines = ["| " + " | ".join(map(_md_cell, block.headers)) + " |",
                     "|" + "---|" * len(block.headers)]
            lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in block.rows]
            out.append("\n".join(lines))
        elif isinstance(block, Image):
            out.append(f"![{block.caption}](images/{block.name})\n\n*{block.caption}*")
        elif isinstance(block, Code):
            out.append(_fence(block.text))
        elif isinstance(block, Details):
            out.append(f"<details><summary>{html.escape(block.summary)}</summary>\n\n{_fence(block.text)}\n\n"
                       "</details>")
    return "\n\n".join(out) + "\n"


def to_html(blocks: Sequence[Block], title: str) -> str:
    """One self-contained page: inline CSS, images as data URIs, every text escaped."""
    esc = html.escape
    out = [f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(title)}</title>"
           f"<style>{CSS}</style></head><body>"]
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"<h{block.level}>{esc(block.text)}</h{block.level}>")
        elif isinstance(block, Para):
            out.append(f"<p>{esc(block.text)}</p>")
        elif isinstance(block, TableBlock):
            head = "".join(f"<th>{esc(str(h))}</th>" for h in block.headers)
            body = "".join("<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>" for row in block.rows)
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif isinstance(block, Image):
            data = base64.b64encode(Path(block.path).read_bytes()).decode("ascii")
            out.append(f"<figure><img alt=\"{esc(block.caption)}\" src=\"data:image/png;base64,{data}\">"
                       f"<figcaption>{esc(block.caption)}</figcaption></figure>")
        elif isinstance(block, Code):
            out.append(f"<pre><code>{esc(block.text)}</code></pre>")
        elif isinstance(block, Details):
            out.append(f"<details><summary>{esc(block.summary)}</summary><pre><code>{esc(block.text)}</code></pre>"
                       "</details>")
    out.append("</body></html>\n")
    return "\n".join(out)
