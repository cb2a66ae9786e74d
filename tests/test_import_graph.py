"""The import graph of Mooring's four packages, read from the sources with `ast`: no circle, no arrow up.

Every `import` counts as an arrow, wherever it stands: at a module's top, inside a function (imported late to
keep `mooring --help` fast) or under `if TYPE_CHECKING:`. `import a.b.c` and `from a.b import c` point at the
module `a.b.c`; `from a.b import name` (a name, not a module) points at the package `a.b`.

The layering rule, lowest first (docs/design.md, "Layout"):

- `tasks/` (the work: data, models, algorithms, privacy) imports nothing else of Mooring;
- `orchestrator/`'s runtime, its sub-packages (driver, server, clients, ray_runtime, io, experiment, reporting),
  imports `tasks/` and itself, never `pipelines/`, `mooring/` or the entry layer;
- `pipelines/` (compositions of runs) imports `orchestrator/` and `tasks/`, never `mooring/` (a pipeline that is
  also a command takes the CLI's argument helpers, `orchestrator/commands/common.py`, and its exit codes);
- the entry layer, `orchestrator/cli.py`, `orchestrator/commands/`, `orchestrator/docs_site.py` (the MkDocs
  hook that reads the parser) and `orchestrator/docs/` (what the hook builds), stands above the runtime and
  `pipelines/`, and may import both;
- `mooring/` (the Python API) may import all of them.

And no module reaches a module that reaches it back (no circle), within a layer or across layers.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tasks", "orchestrator", "pipelines", "mooring")
ENTRY_LAYER = ("orchestrator.cli", "orchestrator.commands", "orchestrator.docs_site", "orchestrator.docs")
# Which top-level packages each may import besides itself.
MAY_IMPORT = {
    "tasks": set(),
    "orchestrator": {"tasks"},
    "pipelines": {"tasks", "orchestrator"},
    "mooring": {"tasks", "orchestrator", "pipelines"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imported_modules(importer: str, path: Path, known: set[str]) -> set[str]:
    """The Mooring modules `importer` imports anywhere in its source."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            package = _absolute(node, importer, path.name == "__init__.py")
            for alias in node.names:
                submodule = f"{package}.{alias.name}"
                targets.add(submodule if submodule in known else package)
    return {target for target in targets if target in known and target != importer}


def import_graph() -> dict[str, set[str]]:
    modules = source_modules()
    known = set(modules)
    return {name: imported_modules(name, path, known) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # Iterative, so a long chain of imports never hits the recursion limit.
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(found)


def in_entry_layer(module: str) -> bool:
    return any(module == entry or module.startswith(entry + ".") for entry in ENTRY_LAYER)


def arrows_up(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for importer, targets in sorted(graph.items()):
        layer = importer.split(".")[0]
        for target in sorted(targets):
            other = target.split(".")[0]
            if in_entry_layer(importer) and other == "pipelines":
                continue
            runtime_to_entry = layer == "orchestrator" and not in_entry_layer(importer) and in_entry_layer(target)
            if (other == layer or other in MAY_IMPORT[layer]) and not runtime_to_entry:
                continue
            bad.append(f"{importer} -> {target}")
    return bad


def test_the_graph_reads_every_kind_of_import(tmp_path):
    """The reader itself: late imports, relative imports and `from package import module` are arrows."""
    source = tmp_path / "a.py"
    source.write_text("from . import b\nfrom .c import name\nfrom tasks import e\n\n\ndef late():\n"
                      "    import tasks.f\n    from tasks.g import other\n")
    known = {"tasks.pkg.b", "tasks.pkg.c", "tasks.e", "tasks.f", "tasks.g", "tasks.unused"}
    assert imported_modules("tasks.pkg.a", source, known) == {"tasks.pkg.b", "tasks.pkg.c", "tasks.e", "tasks.f",
                                                             "tasks.g"}
    graph = import_graph()
    assert len(graph) > 100
    # Imported inside a function: `load_dataset` imports the loaders it registers when it is first called.
    assert "tasks.data.leaf" in graph["tasks.data.datasets"]
    # `from package import module` points at the module.
    assert "orchestrator.io.storage" in graph["orchestrator.io.checkpoint"]
    assert "tasks.algorithms.base" in graph["tasks.algorithms.fedavg"]


def test_no_import_circle():
    found = cycles(import_graph())
    assert not found, "import circles (each a set of modules that reach one another):\n" + "\n".join(
        " <-> ".join(component) for component in found)


def test_no_arrow_points_up():
    bad = arrows_up(import_graph())
    assert not bad, ("imports against the layering (tasks < orchestrator's runtime < pipelines < orchestrator's "
                     "entry layer < mooring; see this module's docstring):\n" + "\n".join(bad))


def test_the_checks_catch_a_circle_and_an_arrow_up():
    graph = {"tasks.a": {"tasks.b"}, "tasks.b": {"tasks.c"}, "tasks.c": {"tasks.a", "orchestrator.x"},
             "orchestrator.x": {"pipelines.y", "orchestrator.commands.z"}, "orchestrator.cli": {"pipelines.y"},
             "orchestrator.commands.z": {"orchestrator.x"}, "pipelines.y": set()}
    assert cycles(graph) == [["orchestrator.commands.z", "orchestrator.x"], ["tasks.a", "tasks.b", "tasks.c"]]
    assert arrows_up(graph) == ["orchestrator.x -> orchestrator.commands.z", "orchestrator.x -> pipelines.y",
                                "tasks.c -> orchestrator.x"]
