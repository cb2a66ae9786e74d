"""Federated algorithms, registered by name. Importing this package registers every algorithm module in it."""
import importlib
import pkgutil

from tasks.algorithms.base import (
    Algorithm,
    ClientData,
    ClientUpdate,
    HyperParams,
    RoundContext,
    Setup,
    TrainSettings,
)
from tasks.algorithms.registry import ALGORITHMS, register

_NOT_ALGORITHMS = {"base", "capabilities", "engines", "registry"}
for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _NOT_ALGORITHMS and not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["ALGORITHMS", "Algorithm", "ClientData", "ClientUpdate", "HyperParams", "RoundContext", "Setup",
           "TrainSettings", "register"]
