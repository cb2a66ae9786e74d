"""Where a coordinator's clients go on its client actors: hosted block by block, so that a group of clients
(orchestrator/clients/client_groups.py) has one host, and a round's groups planned over the actors, each whole
(`plan_round`: sticky for a method that keeps client state, else balanced by local work)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.clients.client_groups import ClientGroups


def assign_clients(num_clients: int, num_actors: int) -> list[list[int]]:
    """Sticky round-robin assignment: client c lives on actor c mod K, for the whole run."""
    return [list(range(a, num_clients, num_actors)) for a in range(num_actors)]


def plan_round(groups: list[list[int]], owner: dict[int, int], num_actors: int,
               costs: list[float] | None) -> dict[int, list[int]]:
    """Which actor trains which of a round's groups of clients, each group whole: {actor index: client ids}.

    Sticky (costs None, methods with client state): each group on the actor that hosts it (a block of clients
    is hosted by one actor). Balanced: the group of most work first, each to the least loaded actor (ties: the
    host of its first client, else the lower index); a random draw of 10 clients out of 100 puts 7 on one of two
    actors as often as not, which would leave one core idle for much of a round."""
    plan: dict[int, list[int]] = {}
    if costs is None:
        for group in groups:
            plan.setdefault(owner[group[0]], []).extend(group)
        return plan
    load = [0.0] * num_actors
    for group in sorted(groups, key=lambda g: (-sum(costs[c] for c in g), g[0])):
        actor_idx = min(range(num_actors), key=lambda a: (load[a], a != owner.get(group[0]), a))
        load[actor_idx] += sum(costs[c] for c in group)
        plan.setdefault(actor_idx, []).extend(group)
    return plan


class ClientPlacement:
    """A run's clients on its `num_actors` actors: which each hosts (`hosted`, `owner`), and which trains each of
    a round's groups (`plan`); `costs`, each client's local work (client_work.py; None: sticky)."""

    def __init__(self, groups: ClientGroups, num_actors: int, costs: list[float] | None):
        self.client_groups, self.num_actors, self.costs = groups, num_actors, costs
        self.hosted = groups.hosts(num_actors)
        self.owner = {c: a for a, hosted in enumerate(self.hosted) for c in hosted}

    def plan(self, client_ids: list[int]) -> dict[int, list[int]]:
        """{actor index: client ids} of a call's clients, split into their groups, each group whole."""
        return plan_round(self.client_groups.split(client_ids), self.owner, self.num_actors, self.costs)
