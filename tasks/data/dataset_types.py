"""What a dataset loader returns (`ArrayDataset`), the errors it raises, and the registry it joins (`DATASETS`, the
`mooring.datasets` entry points). The loaders (tasks/data/datasets.py's built-ins, leaf.py, shakespeare.py,
torchvision_sets.py) import this module; it imports nothing of Mooring but the registry."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tasks.registry import Registry, not_a_function_of_one


@dataclass
class ArrayDataset:
    name: str
    x_train: np.ndarray  # float32, (N, C, H, W)
    y_train: np.ndarray  # int64, (N,)
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    # naturally split data: each sample's owner (a writer, a speaking role, a user) as an int64 id, and the names
    owners: np.ndarray | None = None
    test_owners: np.ndarray | None = None
    owner_names: list[str] | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


class DatasetNotFound(Exception):
    """A dataset's files are not where the config says; the message names the directory and the files."""


class DataFileError(Exception):
    """A dataset file is there but is not what its format says; the message names the file and the problem."""


def not_a_loader(obj: object) -> str | None:
    """Why `obj`, found outside Mooring, cannot be a dataset loader (None: it can)."""
    return not_a_function_of_one(obj, "a dataset loader (a function (data options) -> ArrayDataset)")


# A loader takes (data options) and returns an ArrayDataset. Options: see orchestrator/experiment/config.py DataConfig.
DATASETS: Registry = Registry("dataset", "mooring.datasets", not_a_loader)
