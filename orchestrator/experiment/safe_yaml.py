"""YAML read as plain data, bounded: the one loader for every YAML file and `--set` value Mooring reads.

`yaml.safe_load` already refuses Python tags, but it recurses once per nesting level (a file nested some
thousands of levels deep ends in a RecursionError), and an alias is a reference that later code walking the
data (validation, printing a value, `to_yaml`) expands in full: nine levels of ten aliases each ("billion
laughs") is a short file that expands to 10⁹ values. Both are refused here, from the parsed nodes, before any
value is built.
"""
from __future__ import annotations

from typing import Any

import yaml

MAX_DEPTH = 100  # levels of nesting; a config uses about five
MAX_VALUES = 100_000  # values once every alias is expanded; a config holds a few hundred


class YamlTooLarge(ValueError):
    """YAML nested too deeply, or whose aliases expand to too many values; the message says which."""


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses a node nested more than MAX_DEPTH levels deep as it composes it."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        if self._depth >= MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise YamlTooLarge(f"nested more than {MAX_DEPTH} levels deep at line {mark.line + 1}, "
                               f"column {mark.column + 1} (at most {MAX_DEPTH} levels are read)")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many values `node` holds with every alias expanded; a node an alias shares is counted once per use
    but measured once (`sizes`, by node id), so a bomb is measured in as many steps as it has nodes."""
    if id(node) not in sizes:
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        sizes[id(node)] = 1 + sum(expanded_size(child, sizes) for child in children)
    return sizes[id(node)]


def load(text: str) -> Any:
    """The YAML document in `text` as plain data (mappings, lists, strings, numbers, booleans, None).
    Raises yaml.YAMLError for malformed YAML or a refused tag, YamlTooLarge past the limits."""
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if expanded_size(node, {}) > MAX_VALUES:
            raise YamlTooLarge(f"its aliases expand to more than {MAX_VALUES:,} values (at most {MAX_VALUES:,} are "
                               "read: an alias bomb?)")
        return loader.construct_document(node)
    finally:
        loader.dispose()
