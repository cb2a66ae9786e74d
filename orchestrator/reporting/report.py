"""A comparison or a sweep as one HTML file a researcher can share: tables, figures embedded in the page, and a
link from each run to its MLflow run. It opens from disk in any browser: no server, no script, nothing fetched.
The same parts as Markdown (write_markdown): a page for a documentation site, its figures beside it."""
from __future__ import annotations

import base64
import html
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# where `mooring ui` serves a local store unless told otherwise (orchestrator/commands/ui.py)
LOCAL_UI = "http://127.0.0.1:5000"


@dataclass(frozen=True)
class Link:
    text: str
    href: str


Cell = str | Link | None


@dataclass(frozen=True)
class Table:
    title: str
    columns: list[str]
    rows: list[list[Cell]]


@dataclass(frozen=True)
class Figure:
    title: str
    png: Path


@dataclass(frozen=True)
class Note:
    text: str


Part = Table | Figure | Note

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 70em; padding: 0 1em; color: #1a1a1a; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.15em; margin-top: 1.8em; }
p.sub { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3em 0.8em; text-align: left; font-variant-numeric: tabular-nums; }
th { background: #f4f4f4; }
img { max-width: 100%; border: 1px solid #eee; }
"""


def mlflow_run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """The MLflow UI's page of a run: on the tracking server itself, or where `mooring ui` serves a local store."""
    base = tracking_uri.rstrip("/") if tracking_uri.startswith(("http://", "https://")) else LOCAL_UI
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}"


def where_links_open(tracking_uri: str) -> str:
    if tracking_uri.startswith(("http://", "https://")):
        return f"Run links open on the tracking server {tracking_uri}."
    return f"Run links open in `mooring ui --uri {tracking_uri}` (it serves {LOCAL_UI})."


def render(title: str, subtitle: str, parts: list[Part]) -> str:
    body = "\n".join(_render_part(part) for part in parts)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_text(title)}</title>"
            f"<style>{STYLE}</style></head>\n<body>\n<h1>{_text(title)}</h1>\n<p class=\"sub\">{_text(subtitle)}</p>\n"
            f"{body}\n</body></html>\n")


def write_report(path: Path, title: str, subtitle: str, parts: list[Part]) -> Path:
    path.write_text(render(title, subtitle, parts), encoding="utf-8")
    return path


def render_markdown(title: str, subtitle: str, parts: list[Part]) -> str:
    """The report as GitHub-flavoured Markdown; a figure is linked by its file's name, so the page reads where
    the PNGs lie beside it."""
    return "\n\n".join([f"# {_md(title)}", _md(subtitle), *(_markdown_part(part) for part in parts)]) + "\n"


def write_markdown(path: Path, title: str, subtitle: str, parts: list[Part]) -> Path:
    path.write_text(render_markdown(title, subtitle, parts), encoding="utf-8")
    return path


def _markdown_part(part: Part) -> str:
    if isinstance(part, Note):
        return _md(part.text)
    if isinstance(part, Figure):
        return f"## {_md(part.title)}\n\n![{_md(part.title)}]({part.png.name})"
    lines = [f"## {_md(part.title)}", "", "| " + " | ".join(_md(c) for c in part.columns) + " |",
             "|" + "---|" * len(part.columns)]
    lines += ["| " + " | ".join(_cell(c, MARKDOWN) for c in row) + " |" for row in part.rows]
    return "\n".join(lines)


def _md(value: str) -> str:
    """Text as text: a table's bar and Markdown's emphasis and link characters escaped, a line break a space."""
    text = str(value).replace("\\", "\\\\")
    for char in "|*_[]<>`":
        text = text.replace(char, "\\" + char)
    return " ".join(text.splitlines())


def _render_part(part: Part) -> str:
    if isinstance(part, Note):
        return f"<p>{_text(part.text)}</p>"
    if isinstance(part, Figure):
        data = base64.b64encode(part.png.read_bytes()).decode("ascii")
        return f"<h2>{_text(part.title)}</h2>\n<img alt=\"{_text(part.title)}\" src=\"data:image/png;base64,{data}\">"
    head = "".join(f"<th>{_text(c)}</th>" for c in part.columns)
    rows = "\n".join("<tr>" + "".join(f"<td>{_cell(c, HTML)}</td>" for c in row) + "</tr>" for row in part.rows)
    return f"<h2>{_text(part.title)}</h2>\n<table>\n<tr>{head}</tr>\n{rows}\n</table>"


def _cell(cell: Cell, syntax: Syntax) -> str:
    if cell is None:
        return "–"
    if isinstance(cell, Link):
        return syntax.link(cell)
    return syntax.text(cell)


def _text(value: str) -> str:
    return html.escape(str(value), quote=True)


@dataclass(frozen=True)
class Syntax:
    """How a page writes a table cell's text and its links."""
    text: Callable[[str], str]
    link: Callable[[Link], str]


HTML = Syntax(_text, lambda link: f"<a href=\"{_text(link.href)}\">{_text(link.text)}</a>")
MARKDOWN = Syntax(_md, lambda link: f"[{_md(link.text)}]({link.href})")
