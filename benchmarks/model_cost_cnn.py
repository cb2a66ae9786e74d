"""`mooring bench cnn`: the small CNN on 28×28 images, per round and to a target accuracy, against the plain and the
vectorised loop (benchmarks/model_cost.py)."""
from __future__ import annotations

from benchmarks.model_cost import CNN, report

__all__ = ["measure", "report"]


def measure(**options) -> dict:
    from benchmarks.model_cost import measure as measure_workload

    return measure_workload(CNN.name, **options)
