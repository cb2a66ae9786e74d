"""docs/design.md's "One round in nine steps": at most ten steps, each naming at least one function as
`module.path:Qualified.name`, and every name it gives importable where the page says (import, then getattr)."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

DESIGN = Path(__file__).resolve().parent.parent / "docs" / "design.md"
HEADING = "## One round in nine steps"
REFERENCE = re.compile(r"`([A-Za-z_][\w.]*):([A-Za-z_][\w.]*)`")
STEP = re.compile(r"^(\d+)\. ", re.M)


def section(text: str, heading: str = HEADING) -> str:
    """The text under `heading`, up to the next heading of its level."""
    start = text.index(heading + "\n") + len(heading) + 1
    end = text.find("\n## ", start)
    return text[start:] if end < 0 else text[start:end]


def steps(text: str) -> list[str]:
    """The numbered steps of `text`, each with its continuation lines."""
    starts = [m.start() for m in STEP.finditer(text)]
    return [text[a:b].strip() for a, b in zip(starts, [*starts[1:], len(text)])]


def missing_references(text: str) -> list[str]:
    """Each `module:name` in `text` that cannot be imported and looked up, with why."""
    missing = []
    for module_name, qualified in REFERENCE.findall(text):
        try:
            obj = importlib.import_module(module_name)
        except ImportError as e:
            missing.append(f"{module_name}:{qualified}: no module ({e})")
            continue
        for part in qualified.split("."):
            if not hasattr(obj, part):
                missing.append(f"{module_name}:{qualified}: no {part} in {getattr(obj, '__name__', obj)}")
                break
            obj = getattr(obj, part)
        else:
            if not callable(obj):
                missing.append(f"{module_name}:{qualified}: not a function")
    return missing


def test_the_round_reads_in_at_most_ten_steps_each_naming_a_function():
    round_steps = steps(section(DESIGN.read_text()))
    assert 1 <= len(round_steps) <= 10, f"{len(round_steps)} steps"
    assert [int(STEP.match(step).group(1)) for step in round_steps] == list(range(1, len(round_steps) + 1))
    unnamed = [step.split("\n")[0] for step in round_steps if not REFERENCE.search(step)]
    assert not unnamed, f"steps naming no module:function: {unnamed}"


def test_every_function_the_round_names_exists_where_it_says():
    text = section(DESIGN.read_text())
    assert len(REFERENCE.findall(text)) >= 10
    assert not missing_references(text)


def test_a_wrong_module_or_name_is_reported():
    text = ("1. `orchestrator.server.federation:Server.run_round`, `orchestrator.server.federation:Server.no_such`,\n"
            "   `orchestrator.ray_runtime.coordinator:Coordinator.run_round`, `tasks.seeds:derive_seed`\n")
    assert [line.split(":")[:2] for line in missing_references(text)] == [
        ["orchestrator.server.federation", "Server.no_such"], ["orchestrator.ray_runtime.coordinator",
                                                              "Coordinator.run_round"]]
    assert len(steps(text)) == 1
