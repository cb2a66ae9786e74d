"""Mooring from Python (a notebook, a script): run one experiment or compare methods, and read the results as
pandas DataFrames. Reference: docs/python-api.md; tutorial: docs/tutorials/notebook.ipynb.

    import mooring

    run = mooring.run("configs/default.yaml", {"algorithm.name": "fedprox", "train.rounds": 5})
    run.history          # a DataFrame, one row per round
    run.summary          # final and best accuracies, bytes sent, seconds
    run.plot()           # accuracy by round (a matplotlib Figure)

    comp = mooring.compare("configs/default.yaml", ["fedavg", "fedprox"], seeds=[0, 1], train={"rounds": 5})
    comp.table           # one row per method: mean and std over seeds
    comp.history         # one row per method, seed and round
"""
from mooring.api import compare, config, run
from mooring.errors import MooringError
from mooring.results import Comparison, Run

__all__ = ["Comparison", "MooringError", "Run", "compare", "config", "run"]
