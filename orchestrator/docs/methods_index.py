"""The methods' index of the documentation site, from the method registry and the tables' configs as they are when
the site is built: one row per registered method with its family (from its capabilities), what its clients send
(its `shares`), its paper (the first parenthesis of its module's docstring), and the papers' tables that run it
(the rows of configs/tables/*.yaml)."""
from __future__ import annotations

import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

# the paper a module's docstring cites: "FedProx (Li et al.): ..." → "Li et al."; its title, after a comma, left out
PAPER = re.compile(r"^[^(]*\(([^)]*?)(?:,\s*\"[^)]*)?\)")


@dataclass(frozen=True)
class MethodRow:
    name: str
    page: str  # the method's page, relative to docs/methods/
    family: str
    shares: str
    paper: str
    tables: tuple[str, ...]  # the tables' papers, e.g. ("fedfa", "fedfm")


def family(algorithm: type) -> str:
    capabilities = algorithm.capabilities()
    kind = ("personalized" if capabilities.global_model else "personalized, no global model") \
        if capabilities.personalized else "global model"
    return f"{kind} (protocol variant)" if algorithm.protocol_variant else kind


def paper(algorithm: type) -> str:
    doc = " ".join((inspect.getdoc(sys.modules[algorithm.__module__]) or "").split("\n\n")[0].split())
    found = PAPER.match(doc)
    cited = found[1].strip() if found else ""
    return "" if not cited or cited.startswith("docs/") else cited


def tables_of(tables_dir: Path) -> dict[str, list[str]]:
    """{method: [the paper of every table config whose rows run it]}; a tuned config (`<paper>.tuned.yaml`) adds
    no table of its own."""
    found: dict[str, list[str]] = {}
    for path in sorted(tables_dir.glob("*.yaml")):
        if "." in path.stem:
            continue
        table = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for method in sorted({row.get("method") for row in (table.get("rows") or {}).values()} - {None}):
            found.setdefault(method, []).append(table.get("paper", path.stem))
    return found


def method_rows(docs_dir: Path, tables_dir: Path) -> list[MethodRow]:
    from tasks.algorithms import ALGORITHMS

    tables = tables_of(tables_dir)
    rows = []
    for name in ALGORITHMS.names():
        algorithm = ALGORITHMS.get(name)
        module = algorithm.__module__.rsplit(".", 1)[-1]
        page = method_page(docs_dir / "methods", name, module)
        rows.append(MethodRow(name, page, family(algorithm), algorithm.shares, paper(algorithm),
                              tuple(tables.get(name, ()))))
    return rows


def method_page(methods_dir: Path, name: str, module: str) -> str:
    """The page that documents a method: its own, its module's, or the one whose heading names it (`fedavg_periodic`
    on FedAvg's); "" if none."""
    for stem in (name, module):
        if (methods_dir / f"{stem}.md").is_file():
            return f"{stem}.md"
    for page in sorted(methods_dir.glob("*.md")):
        if f"`{name}`" in page.read_text(encoding="utf-8").partition("\n")[0]:
            return page.name
    return ""


def methods_index(docs_dir: Path, tables_dir: Path, labels: dict[str, str]) -> str:
    """The index page (docs/methods/index.md in the build); `labels`: each method page's navigation label."""
    lines = ["# Methods", "",
             "Every method Mooring registers, generated from the registry when this site is built: its family "
             "(whether the server keeps a global model, the clients personalized ones, or both), what a client "
             "sends the server in a round, the paper it follows, and the papers' tables (under Tables) that run it. "
             "`algorithm.name` takes the name in the first column; a protocol variant is one paper's evaluation "
             "of another method, left out of `--all-algorithms`.", "",
             "| method | family | what clients share | paper | in the tables of |", "|---|---|---|---|---|"]
    for row in method_rows(docs_dir, tables_dir):
        label = labels.get(f"methods/{row.page}", row.name)
        method = f"[{label}]({row.page}) (`{row.name}`)" if row.page else f"`{row.name}`"
        tables = ", ".join(table_link(docs_dir, paper, labels) for paper in row.tables) or "–"
        lines.append(f"| {method} | {row.family} | {row.shares} | {row.paper or '–'} | {tables} |")
    return "\n".join(lines) + "\n"


def table_link(docs_dir: Path, paper: str, labels: dict[str, str]) -> str:
    page = f"tables/{paper}.md"
    if not (docs_dir / page).is_file():
        return f"`configs/tables/{paper}.yaml`"
    return f"[{labels.get(page, paper)}](../{page})"
