"""A researcher's project outside Mooring, for the tests that run one (tests/test_plugins.py, and
tests/test_cluster_multinode.py submits it): the package my_lab with a method (docs/design.md's example, so the
documented code is the tested code), a model and a dataset of its own, and a config naming them."""
from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import yaml

# the whole method file a researcher writes (FedProx, outside Mooring): the example of docs/design.md's
# "Adding a method", so the documented code is the tested code
DESIGN = Path(__file__).resolve().parents[1] / "docs" / "design.md"
METHOD = re.search(r"## Adding a method.*?```python\n(.*?)```", DESIGN.read_text(), re.S).group(1)

PARTS = '''
"""A model and a dataset of the lab's own."""
import math

import numpy as np
from torch import nn

from tasks.data.datasets import ArrayDataset, stratified_split
from tasks.models.base import FLModel, ModelEntry, ModelParams


class WideParams(ModelParams):
    width: int = 48


class Wide(FLModel):
    def __init__(self, input_shape, num_classes, params):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), params.width), nn.ReLU())
        self.feature_dim, self.num_classes = params.width, num_classes
        self.classifier = nn.Linear(params.width, num_classes)

    def features(self, x):
        return self.body(x)


wide = ModelEntry(Wide, WideParams)


def low_digits(opts):
    """The digits 0 to 4 only."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    keep = digits.target < 5
    x = (digits.images[keep] / 16.0).astype(np.float32)[:, None]
    y = digits.target[keep].astype(np.int64)
    train, test = stratified_split(y, opts.test_fraction, opts.split_seed)
    return ArrayDataset("low_digits", x[train], y[train], x[test], y[test], 5)
'''

MY_PROX = "my_lab.method:MyProx"


def lab_config(tmp: Path, algorithm: str = MY_PROX, **algorithm_blocks) -> dict:
    return {"name": "lab", "seed": 0,
            "data": {"dataset": "my_lab.parts:low_digits", "num_clients": 4, "partitions_dir": str(tmp / "p"),
                     "partition": {"kind": "dirichlet", "alpha": 0.5, "min_size": 10}},
            "model": {"name": "my_lab.parts:wide", "width": 32},
            "algorithm": {"name": algorithm, **algorithm_blocks},
            "train": {"rounds": 3, "optimizer": {"name": "sgd", "lr": 0.1}, "engine": "sequential"},
            "checkpoint": {"dir": str(tmp / "runs"), "every": 0},
            "tracking": {"uri": f"sqlite:///{tmp / 'mlflow.db'}"}}


def forget_lab() -> None:
    """Drop my_lab and its modules from this process's imports, as a new process starts without them: every test's
    project is a package of that same name in its own directory, so one imported earlier would hide the next."""
    for name in [m for m in sys.modules if m == "my_lab" or m.startswith("my_lab.")]:
        del sys.modules[name]
    importlib.invalidate_caches()


def write_lab(root: Path) -> Path:
    """The project in `root`: my_lab/ and lab.yaml (the method's block with mu = 0.5)."""
    (root / "my_lab").mkdir()
    (root / "my_lab" / "__init__.py").write_text("")
    (root / "my_lab" / "method.py").write_text(METHOD.lstrip())
    (root / "my_lab" / "parts.py").write_text(PARTS.lstrip())
    (root / "lab.yaml").write_text(yaml.safe_dump(lab_config(root, my_prox={"mu": 0.5}), sort_keys=False))
    return root
