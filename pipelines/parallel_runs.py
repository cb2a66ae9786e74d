"""How many of a composition's runs go to Ray at once: as many as the cluster's CPUs hold, each run with its
client actors."""
from __future__ import annotations


def default_parallel(actors_per_run: int, cpus_per_actor: float) -> int:
    import ray

    cpus = ray.cluster_resources().get("CPU", 1)
    return max(1, int(cpus // (actors_per_run * cpus_per_actor)))
