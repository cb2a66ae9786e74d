"""The tutorial notebook executed as Jupyter would run it, with its outputs, for the documentation site:
`python -m orchestrator.docs.notebook NOTEBOOK OUT_DIR`.

Every code cell runs in order in one namespace (no Jupyter kernel: the notebook is plain Python, which
tests/test_python_api.py checks), with the parameters given run right after the cell tagged `parameters`, as
papermill injects them. A cell's output is what it printed and the value of its last line when that line is an
expression (a DataFrame as its HTML table, a matplotlib Figure as a PNG, anything else as its repr). The site's
build (orchestrator/docs_site.py) runs this in a process of its own, in a temporary directory, on a tiny
federation (`BUILD_PARAMETERS`, about half a minute on two cores), and renders the page from what it writes:
`notebook.md`, the figures beside it, and the comparison the notebook made (`comparison.md`, `comparison.png`)
for the home page.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "tutorials" / "notebook.ipynb"
# the site's run: four clients training in the coordinator, three rounds, one seed
BUILD_SETTINGS = {"data.num_clients": 4, "train.rounds": 3, "resources.clients_on": "coordinator"}
BUILD_PARAMETERS = (f"CONFIG = {str(ROOT / 'configs' / 'default.yaml')!r}\nSETTINGS = {BUILD_SETTINGS!r}\n"
                    "SEEDS = [0]\nOUT = 'results/notebook'\n")


@dataclass
class Cell:
    kind: str  # "markdown" | "code"
    source: str
    tags: list[str] = field(default_factory=list)
    printed: str = ""
    value: Any = None  # the last line's value, when it is an expression that is not None


class NotebookError(Exception):
    """A cell raised; one line naming the cell."""


def read_cells(path: Path) -> list[Cell]:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    return [Cell(cell["cell_type"], "".join(cell["source"]), cell.get("metadata", {}).get("tags", []))
            for cell in notebook["cells"] if cell["cell_type"] in ("markdown", "code")]


def execute(path: Path, parameters: str) -> tuple[list[Cell], dict]:
    """Every cell of the notebook at `path`, its code cells run in order with their outputs filled in, and the
    namespace they ran in."""
    cells = read_cells(path)
    namespace: dict = {"__name__": "__main__"}
    for number, cell in enumerate(cells, 1):
        if cell.kind != "code":
            continue
        where = f"{path.name}, cell {number}"
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            cell.value = run_cell(cell.source, namespace, where)
            if "parameters" in cell.tags:
                run_cell(parameters, namespace, f"{path.name}, injected parameters")
        cell.printed = printed.getvalue()
    return cells, namespace


def run_cell(source: str, namespace: dict, where: str) -> Any:
    """Runs `source` in `namespace`; the value of its last statement when that is an expression."""
    tree = ast.parse(source, where)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    try:
        exec(compile(tree, where, "exec"), namespace)  # noqa: S102 (the repository's own notebook)
        if last is not None:
            return eval(compile(ast.Expression(last.value), where, "eval"), namespace)  # noqa: S307
    except Exception as e:
        raise NotebookError(f"{where} raised {type(e).__name__}: {e}") from e
    return None


# ------------------------------------------------------------------------------------------ rendering
def render(cells: list[Cell], out: Path, stem: str) -> str:
    """The notebook as a markdown page, its figures written into `out` as `<stem>-<cell>.png`; after the first
    cell, a note on how its outputs were made."""
    parts = []
    for number, cell in enumerate(cells, 1):
        if cell.kind == "markdown":
            parts.append(cell.source)
            if number == 1:
                parts.append(build_note(stem))
            continue
        parts.append(fenced("python", cell.source))
        if cell.printed:
            parts.append(fenced("text", cell.printed.rstrip("\n")))
        if cell.value is not None:
            parts.append(shown(cell.value, out, f"{stem}-{number}.png", f"the figure cell {number} returns"))
    return "\n\n".join(parts) + "\n"


def build_note(stem: str) -> str:
    return ("!!! note \"Outputs from this site's build\"\n"
            f"    [Download the notebook]({stem}.ipynb). The outputs below were made when this site was built, "
            "by running it on a tiny federation, with the parameters cell followed by\n\n"
            + "\n".join(f"        {line}" for line in BUILD_PARAMETERS.replace(str(ROOT) + "/", "").splitlines()))


def fenced(language: str, text: str) -> str:
    return f"``` {language}\n{text}\n```"


def shown(value: Any, out: Path, image: str, alt: str) -> str:
    """A value as Jupyter shows it: a table, a figure, or its repr."""
    from matplotlib.figure import Figure
    from pandas import DataFrame, Series

    if isinstance(value, Series):
        value = value.to_frame()
    if isinstance(value, DataFrame):
        return html_table(value)
    if isinstance(value, Figure):
        value.savefig(out / image, dpi=80, bbox_inches="tight")
        return f"![{alt}]({image})"
    return fenced("text", repr(value))


def html_table(frame) -> str:
    """A DataFrame as an HTML table the site styles as its own tables (no pandas class)."""
    table = frame.to_html(border=0, float_format=lambda x: f"{x:.4g}", na_rep="–")
    table = table.replace(' class="dataframe"', "")
    return f'<div class="notebook-output">\n{table}\n</div>'


def comparison(namespace: dict, out: Path) -> None:
    """The notebook's comparison (`comp`) for the home page: its table (`comparison.md`, a row per method) and
    plot (`comparison.png`)."""
    comp = namespace["comp"]
    lines = ["| method | seeds | global accuracy (%), last round | MB sent | seconds |", "|---|---|---|---|---|"]
    for method, row in comp.table.iterrows():
        spread = "" if row["global_accuracy_std"] is None or row["global_accuracy_std"] != row["global_accuracy_std"] \
            else f" ± {100 * row['global_accuracy_std']:.2f}"
        lines.append(f"| {method} | {row['seeds']} | {100 * row['global_accuracy_mean']:.2f}{spread} | "
                     f"{row['bytes_sent'] / 1e6:.2f} | {row['wall_seconds']:.1f} |")
    (out / "comparison.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    comp.plot().savefig(out / "comparison.png", dpi=80, bbox_inches="tight")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("out", type=Path, help="where notebook.md, its figures and the comparison are written")
    args = parser.parse_args(argv)
    try:
        cells, namespace = execute(args.notebook, BUILD_PARAMETERS)
        args.out.mkdir(parents=True, exist_ok=True)
        page = render(cells, args.out, args.notebook.stem)
        (args.out / f"{args.notebook.stem}.md").write_text(page, encoding="utf-8")
        comparison(namespace, args.out)
    except (NotebookError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
