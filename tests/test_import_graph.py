"""The import graph of Mooring's packages, read from the sources with `ast`: no circle, no arrow up.

Every import counts as an arrow, wherever it stands: at a module's top, inside a function (imported late to keep
`mooring --help` fast) or under `if TYPE_CHECKING:`, and so does `importlib.import_module("a.b")` with a literal
name. `import a.b.c` and `from a.b import c` point at the module `a.b.c`; `from a.b import name` (and `from a.b
import c` too) also point at the package `a.b`, whose `__init__.py` runs first; `import a` points at `a`'s
`__init__.py`.

The layers, lowest first (docs/design.md, "Layers"): `LAYERS` below, each a set of parts. In `tasks/`,
`orchestrator/` and `pipelines/` a part is a sub-package or a top module (the package's own `__init__.py` is one
too); `benchmarks/` and `mooring/` are a part each. A module imports only from its own layer and those below, and
every part has its place. Within a layer, and in `benchmarks/`, no module reaches a module that reaches it back (no
circle).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tasks", "orchestrator", "pipelines", "benchmarks", "mooring")
# packages whose parts (sub-packages and top modules) are layered one by one
LAYERED = ("tasks", "orchestrator", "pipelines")
LAYERS: tuple[tuple[str, ...], ...] = (
    # tasks/: the work, no Ray
    ("tasks", "tasks.types", "tasks.seeds", "tasks.typed_values", "tasks.json_data", "tasks.registry"),
    ("tasks.data",),
    ("tasks.models",),
    ("tasks.privacy", "tasks.robust"),
    ("tasks.algorithms",),
    # orchestrator/'s runtime
    ("orchestrator", "orchestrator.errors", "orchestrator.process_memory", "orchestrator.phases"),
    ("orchestrator.io",),
    ("orchestrator.experiment",),
    ("orchestrator.clients",),
    ("orchestrator.server",),
    ("orchestrator.ray_runtime",),
    ("orchestrator.reporting",),
    ("orchestrator.driver",),
    ("orchestrator.arguments",),  # the arguments the commands share, pipelines' commands too
    # pipelines/: compositions of runs
    # what a comparison, a sweep file and a table file are, read apart from running them
    ("pipelines", "pipelines.comparison", "pipelines.sweep_config", "pipelines.table_config", "pipelines.trial_store",
     "pipelines.parallel_runs"),
    ("pipelines.paired", "pipelines.table_stats"),  # the statistics comparisons and tables are read with
    # a sweep's pieces: its objective, file, Optuna objects, trials and drivers, the best trial's test score
    ("pipelines.sweep_objective", "pipelines.sweep_file", "pipelines.sweep_optuna", "pipelines.best_on_test",
     "pipelines.study_trials", "pipelines.sweep_trial", "pipelines.driver_liveness", "pipelines.tuning_progress"),
    ("pipelines.reports", "pipelines.sweep_tracking", "pipelines.table_report"),  # what is written for people
    # a sweep run, and a table's rows tuned by sweeps
    ("pipelines.trial_outcomes", "pipelines.sweep_driver", "pipelines.sweep", "pipelines.table_tuning"),
    # the commands the command line routes to, each with its pipeline: compare, claims, table, sweep
    ("pipelines.compare", "pipelines.claims", "pipelines.tables", "pipelines.sweep_cli"),
    # the measurements, the command line, the Python API
    ("benchmarks",),
    ("orchestrator.commands",),
    ("orchestrator.cli",),
    ("orchestrator.docs",),  # what the documentation hook builds: KaTeX, the methods' index, the tutorial page
    ("orchestrator.docs_site",),
    ("mooring",),
)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    return {module_name(path, root): path for package in packages for path in sorted((root / package).rglob("*.py"))}


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imported_by_importlib(node: ast.Call) -> str | None:
    """The literal module name of `importlib.import_module("a.b")` or `import_module("a.b")`."""
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
    if name != "import_module" or not node.args:
        return None
    first = node.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def imported_modules(importer: str, path: Path, known: set[str]) -> set[str]:
    """The modules (of `known`) that `importer` imports anywhere in its source."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            package = _absolute(node, importer, path.name == "__init__.py")
            targets.add(package)
            targets.update(f"{package}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and (literal := _imported_by_importlib(node)):
            targets.add(literal)
    return {target for target in targets if target in known and target != importer}


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    modules = source_modules(root, packages)
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


def part_of(module: str, layered: tuple[str, ...] = LAYERED) -> str:
    """A module's part: in a package whose parts are layered, its sub-package or top module (the package's own
    `__init__.py` is a part of its own); elsewhere the package."""
    names = module.split(".")
    return ".".join(names[:2]) if names[0] in layered else names[0]


def layer_of(module: str, layers: tuple[tuple[str, ...], ...] = LAYERS, layered: tuple[str, ...] = LAYERED) -> int:
    part = part_of(module, layered)
    for level, parts in enumerate(layers):
        if part in parts:
            return level
    raise AssertionError(f"{module}: its part {part} is in no layer of tests/test_import_graph.py's LAYERS")


def arrows_up(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...] = LAYERS,
              layered: tuple[str, ...] = LAYERED) -> list[str]:
    return sorted(f"{importer} -> {target}" for importer, targets in graph.items() for target in targets
                  if layer_of(target, layers, layered) > layer_of(importer, layers, layered))


def test_the_graph_reads_every_kind_of_import(tmp_path):
    """The reader itself: late imports, relative imports, `from package import module` (the package and the
    module), and importlib with a literal name are arrows."""
    source = tmp_path / "a.py"
    source.write_text("import importlib\nfrom . import b\nfrom .c import name\nfrom tasks import e\n\n\ndef late():\n"
                      "    import tasks.f\n    from tasks.g import other\n    importlib.import_module('tasks.h')\n"
                      "    importlib.import_module(some_name)\n")
    known = {"tasks", "tasks.pkg", "tasks.pkg.b", "tasks.pkg.c", "tasks.e", "tasks.f", "tasks.g", "tasks.h",
             "tasks.unused"}
    assert imported_modules("tasks.pkg.a", source, known) == {"tasks", "tasks.pkg", "tasks.pkg.b", "tasks.pkg.c",
                                                             "tasks.e", "tasks.f", "tasks.g", "tasks.h"}
    graph = import_graph()
    assert len(graph) > 100
    # Imported inside a function: `load_dataset` imports the loaders it registers when it is first called.
    assert "tasks.data.leaf" in graph["tasks.data.datasets"]
    # `from package import module` points at the module and the package.
    assert {"orchestrator.io", "orchestrator.io.storage"} <= graph["orchestrator.io.checkpoint"]
    assert "tasks.algorithms.base" in graph["tasks.algorithms.fedavg"]


def test_pipelines_is_layered_module_by_module_between_the_arguments_and_the_benchmarks():
    order = ["orchestrator.arguments", "pipelines.comparison", "pipelines.paired", "pipelines.sweep_file",
             "pipelines.reports", "pipelines.sweep", "pipelines.compare", "benchmarks.common"]
    assert [layer_of(name) for name in order] == sorted({layer_of(name) for name in order})
    assert part_of("pipelines.sweep_driver") == "pipelines.sweep_driver" and part_of("benchmarks.common") == "benchmarks"


def test_every_part_is_in_a_layer():
    for name in import_graph():
        layer_of(name)


def test_no_import_circle():
    found = cycles(import_graph())
    assert not found, "import circles (each a set of modules that reach one another):\n" + "\n".join(
        " <-> ".join(component) for component in found)


def test_no_arrow_points_up():
    bad = arrows_up(import_graph())
    assert not bad, ("imports of a layer above (the layers: LAYERS in this module, docs/design.md's \"Layers\"):\n"
                     + "\n".join(bad))


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


SYNTHETIC_LAYERS = (("pkg", "pkg.low"), ("pkg.high",))
SYNTHETIC_LAYERED = ("pkg",)
CLEAN = {"pkg/__init__.py": "", "pkg/low/__init__.py": "", "pkg/low/a.py": "X = 1\n",
         "pkg/high/__init__.py": "", "pkg/high/b.py": "from pkg.low.a import X\n"}


def synthetic_findings(root: Path, files: dict[str, str]) -> tuple[list[list[str]], list[str]]:
    write_tree(root, {**CLEAN, **files})
    graph = import_graph(root, ("pkg",))
    return cycles(graph), arrows_up(graph, SYNTHETIC_LAYERS, SYNTHETIC_LAYERED)


def test_a_clean_synthetic_tree_passes(tmp_path):
    assert synthetic_findings(tmp_path, {}) == ([], [])


def test_an_arrow_up_is_caught_inside_a_function_too(tmp_path):
    late = "def f():\n    from pkg.high.b import X\n    return X\n"
    assert synthetic_findings(tmp_path, {"pkg/low/c.py": late}) == ([], ["pkg.low.c -> pkg.high.b"])


def test_a_circle_through_a_package_init_is_caught(tmp_path):
    """As tasks/algorithms/base.py's `from tasks.algorithms import optimizers` was: the package's `__init__.py`
    imports the module that imports from the package."""
    found, up = synthetic_findings(tmp_path, {"pkg/low/__init__.py": "from pkg.low.a import X\n",
                                              "pkg/low/a.py": "from pkg.low import c\nX = 1\n",
                                              "pkg/low/c.py": "Y = 2\n"})
    assert (found, up) == ([["pkg.low", "pkg.low.a"]], [])


def test_a_circle_through_importlib_is_caught(tmp_path):
    found, up = synthetic_findings(tmp_path, {"pkg/low/c.py": "import importlib\n\n\ndef f():\n"
                                                              "    return importlib.import_module('pkg.low.d')\n",
                                              "pkg/low/d.py": "from pkg.low.c import f\n"})
    assert (found, up) == ([["pkg.low.c", "pkg.low.d"]], [])


def test_an_arrow_up_through_importlib_is_caught(tmp_path):
    lazy = "from importlib import import_module\n\nB = import_module('pkg.high.b')\n"
    assert synthetic_findings(tmp_path, {"pkg/low/c.py": lazy}) == ([], ["pkg.low.c -> pkg.high.b"])


def test_a_part_in_no_layer_is_an_error(tmp_path):
    write_tree(tmp_path, {**CLEAN, "pkg/elsewhere.py": ""})
    with pytest.raises(AssertionError, match="pkg.elsewhere: its part pkg.elsewhere is in no layer"):
        for name in import_graph(tmp_path, ("pkg",)):
            layer_of(name, SYNTHETIC_LAYERS, SYNTHETIC_LAYERED)
