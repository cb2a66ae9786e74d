"""Algorithms register by name; the config's `algorithm.name` picks one."""
from __future__ import annotations

from tasks.registry import Registry

ALGORITHMS: Registry = Registry("algorithm")


def register(cls):
    """Class decorator: registers an Algorithm subclass under its `name`."""
    ALGORITHMS.register(cls.name)(cls)
    return cls
