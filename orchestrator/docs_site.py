"""The documentation site's generated pages, a MkDocs hook (mkdocs.yml names this file): each `mkdocs build` writes
the reference from the code as it is then, so a new command, option, config key, method page or table needs no
edit here. Every `mooring` command and option comes from the argparse parser (orchestrator/cli.py), every config
key with its type, default and description from the pydantic schemas (orchestrator/experiment/config.py; the sweep
file's, pipelines/sweep_config.py), the algorithm interface from the docstrings of tasks/algorithms/base.py, the
methods' index from the method registry and the tables' configs (orchestrator/docs/methods_index.py), the tutorial's
page from the notebook executed on a tiny federation (orchestrator/docs/notebook.py, whose comparison the home page
shows); KaTeX, installed by `make install` (orchestrator/docs/katex.py), is copied into the site. The navigation
lists every page found under docs/. The pages live in the build only: nothing is written into docs/."""
from __future__ import annotations

import argparse
import enum
import inspect
import os
import re
import subprocess
import sys
import tempfile
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

# The navigation's tabs. A page of a folder is placed in its folder's tab; a page at the top of docs/ in the tab
# named here, else under How-to's Topics, so a new page needs no edit here.
NAV_FIRST = ["index.md", "getting-started.md"]
PLACED = {"claims.md": "Tables", "python-api.md": "Reference", "design.md": "Design", "method-contract.md": "Design"}
FOLDER_TABS = {"tutorials": "Tutorials", "how-to": "How-to", "methods": "Methods", "tables": "Tables"}
TABS = ["Getting started", "Tutorials", "How-to", "Methods", "Tables", "Reference", "Design"]
ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_PAGE = "tutorials/notebook.md"  # generated from docs/tutorials/notebook.ipynb
METHODS_INDEX = "methods/index.md"  # generated
KATEX_DIR = "assets/katex"  # where the built site holds KaTeX


# ------------------------------------------------------------------------------------------------ CLI
@dataclass(frozen=True)
class CliOption:
    command: str  # "mooring config show"
    flags: tuple[str, ...]  # ("--set",); a positional argument: its metavar or name, ("CONFIG",)
    metavar: str
    help: str
    default: Any


def cli_parsers(parser: argparse.ArgumentParser | None = None, prog: str = "mooring"
                ) -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    """(command words, parser, one-line help) for `mooring` and every subcommand below it, depth first."""
    if parser is None:
        from orchestrator.cli import build_parser

        parser = build_parser()[0]
        yield prog, parser, parser.description or ""
    for action in parser._actions:  # argparse has no public walk of its subcommands
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield f"{prog} {name}", sub, helps.get(name, "")
                yield from cli_parsers(sub, f"{prog} {name}")


def cli_options(command: str, parser: argparse.ArgumentParser) -> list[CliOption]:
    """The options and positional arguments of one command (not its subcommands, not --help)."""
    options = []
    for action in parser._actions:
        if isinstance(action, (argparse._SubParsersAction, argparse._HelpAction)):
            continue
        name = action.metavar if isinstance(action.metavar, str) else action.dest
        flags = tuple(action.option_strings) or (name,)
        metavar = "" if not action.option_strings or action.nargs == 0 else (name if action.metavar else
                                                                              action.dest.upper())
        options.append(CliOption(command, flags, metavar, action.help or "", action.default))
    return options


def cli_reference() -> str:
    lines = ["# Command line", "",
             "Generated from `mooring`'s parser when the site is built: every command, its usage and every "
             "option. `mooring COMMAND --help` prints the same.", ""]
    for command, parser, help_text in cli_parsers():
        lines += [f"## {command}", "", help_text, "", "```text", parser.format_usage().strip(), "```", ""]
        lines += [option_line(option) for option in cli_options(command, parser)] + [""]
    return "\n".join(lines)


def option_line(option: CliOption) -> str:
    flags = ", ".join(f"`{flag}{' ' + option.metavar if option.metavar else ''}`" for flag in option.flags)
    default = "" if option.default in (None, False, argparse.SUPPRESS) else f" (default: `{option.default}`)"
    return f"- {flags}: {escape(option.help)}{default}"


# --------------------------------------------------------------------------------------------- config
@dataclass(frozen=True)
class ConfigKey:
    key: str  # "data.partition.alpha"
    type: str
    default: str
    description: str
    condition: str = ""  # where the key applies only under one choice: "model.name = mlp"


def config_keys(model: type[BaseModel] | None = None, prefix: str = "", condition: str = "") -> list[ConfigKey]:
    """Every key of the experiment config (nested blocks flattened to dotted keys), in the schema's order; a mapping
    of names to blocks lists a block's keys under KEY, and a block chosen among several by a field of its own (a
    sweep's sampler by its `name`) lists each choice's keys under that choice."""
    if model is None:
        from orchestrator.experiment.config import ExperimentConfig

        model = ExperimentConfig
    keys = []
    for name, field in model.model_fields.items():
        key, held = f"{prefix}{name}", field.annotation
        if get_origin(held) is dict:
            key, held = f"{key}.KEY", get_args(held)[1]
        blocks = nested_models(held)
        if not blocks:
            keys.append(ConfigKey(f"{prefix}{name}", type_name(field.annotation), default_of(field),
                                  field.description or "", condition))
            continue
        described = field.description or (first_line(blocks[0].__doc__) if len(blocks) == 1 else "")
        keys.append(ConfigKey(f"{prefix}{name}", type_name(field.annotation), "", described, condition))
        keys += block_keys(blocks, key, condition)
    return keys


def block_keys(blocks: list[type[BaseModel]], key: str, condition: str) -> list[ConfigKey]:
    """The keys of the block at `key`: of its one model, or of each model it may be, under the choice of it."""
    if len(blocks) == 1:
        return config_keys(blocks[0], f"{key}.", condition)
    chooser, choices = choosing_field(blocks)
    keys = [ConfigKey(f"{key}.{chooser}", " | ".join(map(repr, choices)), "",
                      "which one; the keys below each apply under one choice", condition)]
    for block, choice in zip(blocks, choices):
        keys += [k for k in config_keys(block, f"{key}.", f"{key}.{chooser} = {choice}")
                 if k.key != f"{key}.{chooser}"]
    return keys


def choosing_field(blocks: list[type[BaseModel]]) -> tuple[str, list[Any]]:
    """The field whose one literal value tells the blocks apart (a sweep's sampler `name`, a parameter's `type`)."""
    def literal(block: type[BaseModel], name: str) -> Any:
        args = get_args(block.model_fields[name].annotation)
        return args[0] if get_origin(block.model_fields[name].annotation) is Literal and len(args) == 1 else None

    name = next(n for n in blocks[0].model_fields if all(n in b.model_fields and literal(b, n) for b in blocks))
    return name, [literal(block, name) for block in blocks]


def algorithm_keys() -> list[ConfigKey]:
    """`algorithm.NAME.PARAM` for every registered method's hyperparameters."""
    from tasks.algorithms import ALGORITHMS

    return [key for name in ALGORITHMS.names() for key in params_keys(ALGORITHMS.get(name).Params,
                                                                       f"algorithm.{name}.")]


def model_keys() -> list[ConfigKey]:
    """`model.OPTION` for every registered model's options, each under the model it belongs to."""
    from tasks.models import MODELS

    return [key for name in MODELS.names()
            for key in params_keys(MODELS.get(name).params, "model.", f"model.name = {name}")]


def params_keys(params: type[BaseModel], prefix: str, condition: str = "") -> list[ConfigKey]:
    return [ConfigKey(prefix + name, type_name(field.annotation), default_of(field), field.description or "",
                      condition) for name, field in params.model_fields.items()]


def nested_model(annotation: Any) -> type[BaseModel] | None:
    """The config block a field holds (`ClaimsConfig | None` holds one too), or None for a plain value."""
    return next(iter(nested_models(annotation)), None)


def nested_models(annotation: Any) -> list[type[BaseModel]]:
    """The config blocks a field may hold: one (`ClaimsConfig | None`), several (a sweep's samplers), or none."""
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    candidates = [annotation] + list(get_args(annotation) if is_union(annotation) else [])
    return [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]


def is_union(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType)


def type_name(annotation: Any) -> str:
    """A field's type as a reader writes it: `int | None`, `int | 'auto'`, `list[float]`."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return type_name(args[0])
    if is_union(annotation) or origin is Literal:
        return " | ".join(repr(arg) if origin is Literal else type_name(arg) for arg in args)
    if origin is not None:
        return f"{getattr(origin, '__name__', origin)}[{', '.join(type_name(arg) for arg in args)}]"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " | ".join(repr(member.value) for member in annotation)
    return "None" if annotation is type(None) else getattr(annotation, "__name__", repr(annotation))


def default_of(field) -> str:
    if field.default_factory is not None:
        return repr(field.default_factory())
    if field.default is PydanticUndefined:
        return "(required)"
    if isinstance(field.default, enum.Enum):
        return repr(field.default.value)
    return "null" if field.default is None else repr(field.default)


def config_reference() -> str:
    lines = ["# Configuration", "",
             "Generated from the config schema (`orchestrator/experiment/config.py`) when the site is built: every key, "
             "its type, default and description. A YAML config sets any of them; `--set KEY=VALUE` overrides one "
             "on the command line; `mooring config show CONFIG` prints the resolved config.", ""]
    sections: dict[str, list[ConfigKey]] = {}
    for key in config_keys():
        sections.setdefault(key.key.split(".")[0], []).append(key)
    for section, keys in sections.items():
        lines += [f"## {section}", ""] + [key_line(key) for key in keys] + [""]
    lines += ["## Algorithms' hyperparameters", "",
              "Each method keeps its hyperparameters in its own block, `algorithm.NAME`; its page under Methods "
              "says where each default comes from.", ""]
    lines += [key_line(key) for key in algorithm_keys()] + [""]
    lines += ["## Models' options", "", "Each model's own options sit beside `model.name`.", ""]
    lines += [key_line(key) for key in model_keys()] + [""]
    lines += ["## The sweep file", "",
              "`mooring sweep FILE` reads these keys (`pipelines/sweep_config.py`; [how to sweep](../how-to/sweep.md)). "
              "`base` names an experiment config, whose keys are above; `params.KEY` searches the config key KEY "
              "(dotted) over the distribution its `type` names.", ""]
    lines += [key_line(key) for key in sweep_keys()] + [""]
    return "\n".join(lines)


def sweep_keys() -> list[ConfigKey]:
    """Every key of a sweep file, from its schema."""
    from pipelines.sweep_config import SweepConfig

    return config_keys(SweepConfig)


def key_line(key: ConfigKey) -> str:
    default = f", default `{key.default}`" if key.default else ""
    default += f", with `{key.condition}`" if key.condition else ""
    description = f": {escape(key.description)}" if key.description else ""
    return f"- `{key.key}` ({escape(key.type)}{default}){description}"


# ---------------------------------------------------------------------------------- algorithm interface
def algorithm_reference() -> str:
    """tasks/algorithms/base.py's module docstring, then each public class (with its methods, `Algorithm`'s client
    and server sides' too) and function, in the file's order, with its signature and docstring; then those of the
    building blocks and shared types it re-exports (local training, losses, model state, tasks/types.py,
    tasks/seeds.py)."""
    from tasks import seeds, types
    from tasks.algorithms import base, local_training, losses, model_state

    lines = ["# Algorithm interface", "", "Generated from the docstrings of `tasks/algorithms/base.py` (with "
             "`client_side.py` and `server_side.py`, the hooks `Algorithm` inherits), the building blocks it "
             "re-exports, `tasks/types.py` and `tasks/seeds.py` when the site is built (a method imports all of it "
             "from `tasks.algorithms.base`).", "", indent_block(inspect.getdoc(base) or ""), ""]
    for module in (base, local_training, losses, model_state, types, seeds):
        if module is not base:
            lines += [f"## From `{module.__name__}`", "", indent_block(inspect.getdoc(module) or ""), ""]
        lines += interface_entries(module, vars(base))  # of the shared modules, what base re-exports
    return "\n".join(lines)


def interface_entries(module, exported: dict[str, Any]) -> list[str]:
    """Each public class (with its methods) and function `module` defines and `exported` holds, with its
    signature and docstring (a helper the module keeps for itself is not part of the interface)."""
    lines: list[str] = []
    for name, obj in defined_in(module):
        if exported.get(name) is not obj:
            continue
        kind = "class" if inspect.isclass(obj) else "def"
        lines += [f"## {name}", "", "```python", f"{kind} {name}{signature(obj)}", "```", "",
                  escape(written_doc(obj)), ""]
        if inspect.isclass(obj):
            for method_name, method in class_members(obj):
                lines += [f"### {name}.{method_name}", "", "```python", f"def {method_name}{signature(method)}",
                          "```", "", escape(written_doc(method)), ""]
    return lines


def class_members(cls: type) -> list[tuple[str, Any]]:
    """The public methods a class defines, then those of its bases in other modules of tasks/algorithms/
    (`Algorithm`'s client side and server side), each class's in source order."""
    sides = [base for base in cls.__bases__
             if base.__module__ != cls.__module__ and base.__module__.startswith("tasks.algorithms.")]
    return [member for owner in (cls, *sides) for member in defined_in(owner)]


def written_doc(obj) -> str:
    """The docstring the source writes (not the one a dataclass makes up from its fields)."""
    doc = inspect.getdoc(obj) or ""
    return "" if inspect.isclass(obj) and doc.startswith(f"{obj.__name__}(") else doc


def defined_in(owner) -> list[tuple[str, Any]]:
    """The public classes and functions a module defines (not imports), or the public methods a class defines,
    in source order."""
    found = []
    for name, obj in vars(owner).items():
        target = obj.__func__ if isinstance(obj, (classmethod, staticmethod)) else obj
        target = target.fget if isinstance(target, property) else target
        if name.startswith("_") or not (inspect.isfunction(target) or inspect.isclass(target)):
            continue
        module = owner.__name__ if inspect.ismodule(owner) else owner.__module__
        if target.__module__ == module:
            found.append((name, target))
    return sorted(found, key=lambda item: inspect.getsourcelines(item[1])[1])


class SourceText(str):
    """An annotation as the source writes it (the module uses postponed annotations): shown without quotes."""

    def __repr__(self) -> str:
        return str(self)


def signature(obj) -> str:
    """`(params) -> result` as the source writes it; a class's constructor without its `-> None`."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return ""
    params = [p.replace(annotation=SourceText(p.annotation)) if isinstance(p.annotation, str) else p
              for p in sig.parameters.values()]
    result = sig.return_annotation
    result = sig.empty if inspect.isclass(obj) else SourceText(result) if isinstance(result, str) else result
    return str(sig.replace(parameters=params, return_annotation=result))


# -------------------------------------------------------------------------------------------- markdown
def escape(text: str) -> str:
    """Plain text from the code, safe inside markdown: no HTML, emphasis or link syntax taken from it; its
    `code spans` kept as they are."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside the code spans
        parts[i] = "".join(MARKDOWN_ESCAPES.get(char, char) for char in parts[i])
    return "`".join(parts)


MARKDOWN_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "*": r"\*", "_": r"\_", "[": r"\["}


def indent_block(text: str) -> str:
    return "\n".join(f"    {line}" if line else "" for line in text.splitlines())


def first_line(doc: str | None) -> str:
    """A docstring's first paragraph on one line."""
    return " ".join(inspect.cleandoc(doc or "").split("\n\n")[0].split())


# the generated reference: path in the site → its navigation label and the function that writes its markdown
REFERENCE = {"reference/cli.md": ("Command line", cli_reference),
             "reference/config.md": ("Configuration", config_reference),
             "reference/algorithm.md": ("Algorithm interface", algorithm_reference)}

# every page the build generates (for a check of links that reads docs/ alone: tests/test_cli_docs.py)
GENERATED = [*REFERENCE, METHODS_INDEX, NOTEBOOK_PAGE]


# ------------------------------------------------------------------------------------------ MkDocs hooks
def site_nav(docs_dir: Path) -> list[Any]:
    """The tabs of TABS, each page under a short label: the getting-started pages, the tutorial (generated) and
    any other tutorial, the how-to guides then the topic pages, the methods' index (generated) and the methods,
    the tables, the generated reference, the design."""
    top = sorted(page.name for page in docs_dir.glob("*.md"))
    tabs: dict[str, list[Any]] = {tab: [] for tab in TABS}
    tabs["Getting started"] = [page for page in NAV_FIRST if page in top]
    tabs["Tutorials"].append(NOTEBOOK_PAGE)
    tabs["Methods"].append(METHODS_INDEX)
    tabs["Tables"] += [f"tables/{name}" for name in ("README.md",) if (docs_dir / "tables" / name).is_file()]
    for page in top:
        if page not in NAV_FIRST and PLACED.get(page) == "Tables":
            tabs["Tables"].append(page)
    for folder, tab in FOLDER_TABS.items():
        tabs[tab] += [f"{folder}/{page.name}" for page in sorted((docs_dir / folder).glob("*.md"))
                      if f"{folder}/{page.name}" not in tabs[tab]]
    topics = [page for page in top if page not in NAV_FIRST and page not in PLACED]
    if topics:
        tabs["How-to"].append({"Topics": topics})
    tabs["Reference"] += list(REFERENCE)
    for tab in ("Reference", "Design"):
        tabs[tab] += [page for page in top if PLACED.get(page) == tab]
    return [{tab: [labelled(docs_dir, entry) for entry in pages]} for tab, pages in tabs.items() if pages]


def labelled(docs_dir: Path, entry: Any) -> Any:
    """A page as {label: path}, the label from page_label; a section's pages labelled the same way."""
    if isinstance(entry, dict):
        return {name: [labelled(docs_dir, page) for page in pages] for name, pages in entry.items()}
    return {page_label(docs_dir, entry): entry}


# a heading's short form: up to its first colon, semicolon or parenthesis ("FedAvg (`fedavg`), ..." → "FedAvg")
HEADING_CUT = re.compile(r":|;| \(")


def page_label(docs_dir: Path, page: str) -> str:
    """A page's navigation label: its front matter's `title`, else its first heading up to the first colon,
    semicolon or parenthesis; a table of another budget (`fedfa.short.md`) says its budget; a folder's README
    is its Overview; the generated pages have their own."""
    generated = {NOTEBOOK_PAGE: notebook_title(docs_dir), METHODS_INDEX: "Overview",
                 **{path: title for path, (title, _) in REFERENCE.items()}}
    if page in generated:
        return generated[page]
    if Path(page).name == "README.md":
        return "Overview"
    from mkdocs.utils.meta import get_data

    text, meta = get_data((docs_dir / page).read_text(encoding="utf-8"))
    if meta.get("title"):
        return str(meta["title"])
    heading = next((line[2:] for line in text.splitlines() if line.startswith("# ")), Path(page).stem)
    label = HEADING_CUT.split(heading, maxsplit=1)[0].strip()
    budget = Path(page).stem.partition(".")[2]
    return f"{label}, {budget} budget" if budget else label


def notebook_title(docs_dir: Path) -> str:
    """The tutorial notebook's title (its metadata's `title`, as nbconvert reads it)."""
    import json

    notebook = json.loads(notebook_path(docs_dir).read_text(encoding="utf-8"))
    return notebook.get("metadata", {}).get("title", "Tutorial")


def notebook_path(docs_dir: Path) -> Path:
    return docs_dir / Path(NOTEBOOK_PAGE).with_suffix(".ipynb")


def on_config(config, **_):
    """The navigation, from the pages found now (a new method page or table appears without an edit); KaTeX
    must be installed, the site typesets its formulas with it."""
    from mkdocs.exceptions import PluginError

    from orchestrator.docs import katex

    if not katex.installed(katex.installed_dir()):
        raise PluginError(f"KaTeX is not installed in {katex.installed_dir()}: `make install` (or `python -m "
                          "orchestrator.docs.katex`) fetches it")
    config["nav"] = site_nav(Path(config["docs_dir"]))
    return config


# a markdown link (not an image): [text](target#anchor)
LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)\s#]+)(#[^)\s]*)?\)")


def on_page_markdown(markdown, page, config, **_):
    """A link to a file of the repository outside docs/ (the README, a source file) works on GitHub, not on the
    site: there it becomes the file's path, as code. A link to nothing stays, for strict mode to refuse. The home
    page's COMPARISON marker becomes the tutorial's comparison, as the build ran it."""
    docs_dir = Path(config["docs_dir"]).resolve()
    root, here = docs_dir.parent, (docs_dir / page.file.src_path).parent

    def outside(link: re.Match) -> str:
        text, target = link[1], link[2]
        if ":" in target:
            return link[0]
        path = (here / target).resolve()
        if path.is_relative_to(docs_dir) or not path.is_relative_to(root) or not path.exists():
            return link[0]
        return f"{text} (`{path.relative_to(root)}`)"

    markdown = LINK.sub(outside, markdown)
    return markdown.replace(COMPARISON, BUILT.get("comparison", "")) if COMPARISON in markdown else markdown


# where the home page shows the tutorial's comparison (its table and plot), and what the build made of it
COMPARISON = "<!-- the tutorial's comparison -->"
BUILT: dict[str, str] = {}


def on_files(files, config, **_):
    """The generated pages (the reference, the methods' index, the executed tutorial with its figures) and KaTeX,
    added to the build (File.generated keeps them out of docs/)."""
    from mkdocs.structure.files import File

    from orchestrator.docs import katex
    from orchestrator.docs.methods_index import methods_index

    docs_dir = Path(config["docs_dir"])
    for path, (_, write) in REFERENCE.items():
        files.append(File.generated(config, path, content=write()))
    labels = {f"{folder}/{page.name}": page_label(docs_dir, f"{folder}/{page.name}")
              for folder in ("methods", "tables") for page in (docs_dir / folder).glob("*.md")}
    files.append(File.generated(config, METHODS_INDEX, content=methods_index(docs_dir, ROOT / "configs" / "tables",
                                                                             labels)))
    for path, content in executed_notebook(notebook_path(docs_dir)).items():
        files.append(File.generated(config, path, content=content))
    for path in sorted(katex.installed_dir().rglob("*")):
        if path.is_file():
            relative = path.relative_to(katex.installed_dir()).as_posix()
            files.append(File.generated(config, f"{KATEX_DIR}/{relative}", abs_src_path=str(path)))
    return files


def executed_notebook(notebook: Path) -> dict[str, str | bytes]:
    """{path in the site: content} of the tutorial's page and figures, from the notebook executed in a process
    of its own in a temporary directory (its runs, MLflow store and results stay there); the home page's
    comparison kept in BUILT."""
    from mkdocs.exceptions import PluginError

    folder = Path(NOTEBOOK_PAGE).parent.as_posix()
    with tempfile.TemporaryDirectory(prefix="mooring-notebook-") as tmp:
        out = Path(tmp) / "out"
        env = {**os.environ, "MPLBACKEND": "Agg",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        done = subprocess.run([sys.executable, "-m", "orchestrator.docs.notebook", str(notebook), str(out)],
                              cwd=tmp, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise PluginError(f"the tutorial notebook {notebook} failed when executed for the site: {last}")
        made = {f"{folder}/{path.name}": path.read_bytes() for path in out.glob("*.png")}
        made[NOTEBOOK_PAGE] = (out / Path(NOTEBOOK_PAGE).name).read_text(encoding="utf-8")
        BUILT["comparison"] = ((out / "comparison.md").read_text(encoding="utf-8") +
                               f"\n![The accuracy by round of each method]({folder}/comparison.png)\n")
    return made
