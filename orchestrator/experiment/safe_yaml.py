"""YAML read as plain data, bounded and unambiguous: the one loader for every YAML file and `--set` value Mooring
reads.

`yaml.safe_load` already refuses Python tags, but it recurses once per nesting level (a file nested some
thousands of levels deep ends in a RecursionError), and an alias is a reference that later code walking the
data (validation, printing a value, `to_yaml`) expands in full: nine levels of ten aliases each ("billion
laughs") is a short file that expands to 10⁹ values. Both are refused here, from the parsed nodes, before any
value is built.

PyYAML also keeps the last of a mapping's repeated keys without a word (a second `train:` block drops the first),
and converts an integer of any length, which Python then cannot print past 4,300 digits. A repeated key and an
integer of more than MAX_INT_DIGITS digits are refused, naming the line.
"""
from __future__ import annotations

from typing import Any

import yaml

MAX_DEPTH = 100  # levels of nesting; a config uses about five
MAX_VALUES = 100_000  # values once every alias is expanded; a config holds a few hundred
MAX_INT_DIGITS = 100  # an integer literal's digits; a config's largest are seeds (10) and search ranges (about 30)
MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlRefused(ValueError):
    """YAML that is well formed but not read; the message is one line saying why and where."""


class YamlTooLarge(YamlRefused):
    """YAML nested too deeply, or whose aliases expand to too many values; the message says which."""


def _at(mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses a node nested more than MAX_DEPTH levels deep as it composes it."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        if self._depth >= MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise YamlTooLarge(f"nested more than {MAX_DEPTH} levels deep at {_at(mark)} (at most {MAX_DEPTH} levels "
                               "are read)")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        """The mapping, each key given once (a `<<` merge's keys may be overridden, as YAML intends)."""
        seen: dict[Any, yaml.Node] = {}
        if isinstance(node, yaml.MappingNode):
            for key_node, _ in node.value:
                if key_node.tag == MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:  # an unhashable key: SafeLoader's own error says so
                    continue
                if first is not key_node:
                    shown = key if isinstance(key, str) and key.isprintable() else repr(key)
                    shown = shown if len(shown) <= 60 else shown[:57] + "..."
                    raise YamlRefused(f"key '{shown}' given twice, at {_at(first.start_mark)} and at "
                                      f"{_at(key_node.start_mark)}; give each key once")
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        digits = len(str(node.value).lstrip("+-").replace("_", ""))
        if digits > MAX_INT_DIGITS:
            raise YamlRefused(f"an integer of {digits} digits at {_at(node.start_mark)} (at most {MAX_INT_DIGITS} "
                              "digits are read)")
        return super().construct_yaml_int(node)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)


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
    Raises yaml.YAMLError for malformed YAML or a refused tag, YamlTooLarge past the limits, YamlRefused for a
    repeated key or an integer too long."""
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
