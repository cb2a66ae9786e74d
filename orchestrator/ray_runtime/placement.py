"""Where a run's actors go: how many client actors the cluster holds, and the coordinator on the driver's node."""
from __future__ import annotations

from orchestrator.errors import RunError
from orchestrator.experiment.config import ExperimentConfig


def default_num_actors(cfg: ExperimentConfig) -> int:
    """resources.num_actors, or as many actors as the cluster's CPUs (and GPUs) hold."""
    import ray

    total = ray.cluster_resources()
    if cfg.resources.num_actors:
        check_fits(cfg, cfg.resources.num_actors, total)
        return min(cfg.resources.num_actors, cfg.data.num_clients)
    fits = int(total.get("CPU", 1) // cfg.resources.cpus_per_actor)
    if cfg.resources.gpus_per_actor > 0:
        fits = min(fits, int(total.get("GPU", 0) // cfg.resources.gpus_per_actor))
    return max(1, min(fits, cfg.resources.max_actors, cfg.data.num_clients))


def check_fits(cfg: ExperimentConfig, num_actors: int, total: dict[str, float]) -> None:
    """Actors that can never be placed would leave their clients waiting forever: refuse them up front."""
    res = cfg.resources
    for name, each in (("CPU", res.cpus_per_actor), ("GPU", res.gpus_per_actor)):
        need = min(num_actors, cfg.data.num_clients) * each
        if need > total.get(name, 0) + 1e-9:
            raise RunError(f"resources.num_actors = {num_actors} × {each:g} {name} per actor needs {need:g} {name}s; "
                           f"the Ray cluster has {total.get(name, 0):g}: lower num_actors or the per-actor share")


def on_this_node():
    """Keep the coordinator (no restarts) on the driver's node, which the run cannot outlive anyway: left to
    Ray's spreading (or with a soft affinity, once that node is half used), a 0-CPU actor may land on a worker
    node, and die with it."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)


def coordinator_name(run_dir: str) -> str:
    return "mooring-coordinator-" + run_dir.rstrip("/").rsplit("/", 1)[-1]


def clients_in_coordinator(cfg: ExperimentConfig, data) -> bool:
    """Whether the run's clients train in the coordinator's process (resources.clients_on)."""
    from orchestrator.clients.client_groups import small_round_steps
    from orchestrator.clients.client_work import client_costs
    from orchestrator.experiment.methods import build_algorithm
    from tasks.algorithms.engines import run_engine

    res = cfg.resources
    if res.clients_on != "auto":
        return res.clients_on == "coordinator"
    if res.gpus_per_actor > 0:
        return False
    costs = client_costs(data, cfg.train)
    round_steps = min(cfg.clients_per_round, len(costs)) * sum(costs) / max(1, len(costs))
    algorithm = build_algorithm(cfg, data.num_classes, data.input_shape)
    return round_steps <= small_round_steps(run_engine(cfg, algorithm), algorithm)
