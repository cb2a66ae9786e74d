"""The global evaluation split over the client actors (resources.evaluate_on): when it is, and which share of the
test sets each actor counts. The pool that sends it is orchestrator/ray_runtime/client_pool.py (docs/design.md,
"Where the global model is evaluated")."""
from __future__ import annotations

import ray


def evaluates_over_client_actors(cfg, algorithm, num_actors: int) -> bool:
    """Whether the global model is evaluated split over the CPU client actors rather than in the coordinator
    (resources.evaluate_on): asked for, or, at auto, a large model (tasks/algorithms/engines.py) on actors that
    hold every CPU of the cluster, where the coordinator's evaluation would take a core from their training
    (benchmarks/README.md, "Where the model is the cost")."""
    from tasks.algorithms.engines import large_model

    res = cfg.resources
    if res.evaluate_on != "auto":
        return res.evaluate_on == "client_actors"
    cpus = ray.cluster_resources().get("CPU", 0)
    return num_actors * res.cpus_per_actor >= cpus and bool(large_model(algorithm))


def evaluation_fractions(training: list[float], samples: int) -> list[float]:
    """Each actor's fraction of an evaluation of `samples` forward passes, queued behind `training` (each actor's
    queued training, in forward passes of one sample): the least loaded actors take it first, up to a common level
    (water-filling), so that the actors finish together where they can."""
    if samples <= 0:
        return [1.0 / len(training)] * len(training)
    order = sorted(training)
    level = order[0] + samples
    for k in range(1, len(order) + 1):
        level = (sum(order[:k]) + samples) / k
        if k == len(order) or level <= order[k]:
            break
    return [max(0.0, level - load) / samples for load in training]


# Shares are cut at multiples of this many samples, so that an actor meets few shapes of evaluation batch: the
# first forward pass of a new shape builds its convolution kernels (about 10 ms for acar_cnn, measured).
SHARE_QUANTUM = 32


def evaluation_shares(sizes: dict[str, int], fractions: list[float]) -> list[dict[str, tuple[int, int]]]:
    """Each test set's samples cut into contiguous shares, one per fraction, at multiples of SHARE_QUANTUM:
    [{test set: (start, end)}]."""
    cumulative = [sum(fractions[:k]) for k in range(len(fractions) + 1)]
    shares: list[dict[str, tuple[int, int]]] = [{} for _ in fractions]
    for name, size in sizes.items():
        bounds = [min(size, SHARE_QUANTUM * round(size * c / SHARE_QUANTUM)) for c in cumulative[:-1]] + [size]
        for part, (start, end) in enumerate(zip(bounds, bounds[1:])):
            shares[part][name] = (start, end)
    return shares
