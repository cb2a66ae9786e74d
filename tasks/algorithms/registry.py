"""Algorithms register by name; the config's `algorithm.name` picks one: a built-in's name, an installed package's
entry point (group `mooring.algorithms`) or a reference `module:Class` (tasks/registry.py)."""
from __future__ import annotations

from tasks.registry import Registry


def not_an_algorithm(obj: object) -> str | None:
    """Why `obj`, found outside Mooring, cannot be a method (None: it can)."""
    from tasks.algorithms.base import Algorithm

    if not (isinstance(obj, type) and issubclass(obj, Algorithm)):
        return "not an Algorithm subclass (tasks.algorithms.base.Algorithm)"
    if obj.name in ALGORITHMS and ALGORITHMS.get(obj.name) is not obj:
        return f"its name {obj.name!r} is a built-in algorithm's; give the class another `name`"
    return None


ALGORITHMS: Registry = Registry("algorithm", "mooring.algorithms", not_an_algorithm)


def register(cls):
    """Class decorator: registers an Algorithm subclass under its `name`."""
    ALGORITHMS.register(cls.name)(cls)
    return cls
