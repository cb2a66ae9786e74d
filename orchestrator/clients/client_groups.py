"""The groups a round's clients train in (train.group_steps), fixed by the config and the round alone.

The client ids are cut once, for the whole run, into blocks of consecutive ids, each holding at most about
`group_steps` optimizer steps a round in expectation (a client's local steps × the chance it is sampled). A
round's groups are its clients that fall in each block, in block order. A group trains together, in one process
(the vectorized engine's batch), and its partial sum (resources.partial_sums) is taken apart from the others';
the server folds the group partials in group order. Which clients share a batch, and the order in which floats
are added, then depend on neither the number of client actors nor on where the clients train, so neither does
the history. Client actors host the clients block by block (orchestrator/ray_runtime/client_pool.py), so that a group of a
method whose clients keep state never spans two actors."""
from __future__ import annotations

import math
from dataclasses import dataclass

# resources.clients_on = auto: a round of at most this many optimizer steps in all (clients per round × a client's
# mean local steps) trains in the coordinator's process (orchestrator/ray_runtime/placement.py). Above it, client
# actors' parallel training outweighs the cost of calling them (a few ms a round). The bounds sit between the workloads measured on each side
# (benchmarks/README.md, "Where clients train"); the exact crossover was not swept.
SMALL_ROUND_STEPS = {"sequential": 64, "vectorized": 256}
# The same for a model whose step costs its arithmetic (tasks/algorithms/engines.py: large_model; acar_cnn's step of
# 16 samples takes about 5 ms on a core, the digits MLP's about 0.2 ms): a round of ten such clients is worth
# client actors, and groups this small spread it over them (benchmarks/README.md, "Where the model is the cost").
LARGE_MODEL_ROUND_STEPS = 8


def small_round_steps(engine: str, algorithm) -> int:
    """The most optimizer steps a round may have and still train in the coordinator, on `engine`, of `algorithm`'s
    model (also the size of a client group)."""
    from tasks.algorithms.engines import large_model

    return LARGE_MODEL_ROUND_STEPS if large_model(algorithm) else SMALL_ROUND_STEPS[engine]


def client_blocks(costs: list[float], clients_per_round: int, group_steps: int) -> list[int]:
    """Each client's block: consecutive client ids, the fewest blocks of at most `group_steps` of the round's
    expected steps (at least one), each about an equal share of them. `costs`: each client's local steps."""
    n = len(costs)
    share = min(1.0, clients_per_round / max(1, n))
    expected = [c * share for c in costs]
    total = sum(expected)
    count = max(1, min(n, math.ceil(total / group_steps - 1e-9)))
    blocks, before = [], 0.0
    for steps in expected:  # a client's block: where the midpoint of its steps falls
        blocks.append(min(count - 1, int((before + steps / 2) * count / total)) if total > 0 else 0)
        before += steps
    return blocks


def group_steps(cfg, engine: str, algorithm) -> int:
    """train.group_steps; auto: the largest round resources.clients_on=auto trains in the coordinator on `engine`
    with `algorithm`'s model (a round that small is one group; a larger one has enough groups to spread over client
    actors)."""
    steps = cfg.train.group_steps
    return small_round_steps(engine, algorithm) if steps == "auto" else steps


@dataclass(frozen=True)
class ClientGroups:
    """The run's blocks of client ids, and a round's clients split by them."""

    blocks: tuple[int, ...]  # blocks[c]: client c's block

    @classmethod
    def of_run(cls, cfg, data, engine: str, algorithm) -> ClientGroups:
        """The groups of a run of `algorithm` whose clients train on `engine` (the one `train.engine` chose)."""
        from orchestrator.clients.client_work import client_costs

        return cls(tuple(client_blocks(client_costs(data, cfg.train), cfg.clients_per_round,
                                       group_steps(cfg, engine, algorithm))))

    @property
    def count(self) -> int:
        return max(self.blocks, default=0) + 1

    def split(self, cids: list[int]) -> list[list[int]]:
        """`cids` by block, in block order, each group in client-id order."""
        groups: dict[int, list[int]] = {}
        for cid in sorted(cids):
            groups.setdefault(self.blocks[cid], []).append(cid)
        return [groups[b] for b in sorted(groups)]

    def hosts(self, num_actors: int) -> list[list[int]]:
        """Which clients each of `num_actors` actors hosts: block b on actor b mod num_actors (the blocks hold
        about equal expected work)."""
        hosted: list[list[int]] = [[] for _ in range(num_actors)]
        for cid, block in enumerate(self.blocks):
            hosted[block % num_actors].append(cid)
        return hosted
