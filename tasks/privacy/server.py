"""The privacy block's part in the server's round (orchestrator/server/federation.py calls it): the payload's clipping
norm, the noised model, and ε after every round (docs/privacy.md)."""
from __future__ import annotations

import math
from typing import Any

from tasks.privacy.coverage import SHARES, Shared
from tasks.privacy.model_updates import ServerModelPrivacy
from tasks.privacy.settings import Privacy
from tasks.types import ClientUpdate, State


class ServerPrivacy:
    def __init__(self, privacy: Privacy, method: str, seed: int, num_clients: int, clients_per_round: int):
        self.privacy, self.num_clients, self.per_round = privacy, num_clients, clients_per_round
        shares = SHARES.get(method, frozenset())
        self.models = (ServerModelPrivacy(privacy.models, seed)
                       if privacy.models.active and Shared.MODEL in shares else None)
        self.stats = privacy.stats if privacy.stats.active and Shared.CLASS_STATS in shares else None
        self.round_clip: float | None = None
        if self.models is not None or self.stats is not None:
            accountant()  # imported now, while the run starts, rather than inside its first round

    def payload(self, payload: State) -> State:
        return payload if self.models is None else self.models.payload(payload)

    def private_state(self, state: State, updates: list[ClientUpdate], round_idx: int, summed: bool) -> State:
        if self.models is None:
            return state
        self.round_clip = self.models.clip
        return self.models.private_state(state, updates, round_idx, summed)

    def metrics(self, rounds_done: int) -> dict[str, float]:
        """ε for δ after `rounds_done` rounds, for each mechanism with noise; the round's clipping norm."""
        out: dict[str, float] = {}
        delta = self.privacy.delta
        if self.models is not None:
            out["dp_clip"] = self.round_clip
            z = self.privacy.models.central_noise_multiplier(self.per_round)
            if z > 0:
                out["dp_epsilon"] = accountant().model_epsilon(z, self.num_clients, self.per_round, rounds_done, delta)
        if self.stats is not None and self.stats.noise_multiplier > 0:
            out["dp_epsilon_stats"] = accountant().stats_epsilon(self.stats.noise_multiplier, rounds_done, delta)
        return {k: v for k, v in out.items() if v is not None and math.isfinite(v)}

    def snapshot(self) -> dict[str, Any]:
        return {} if self.models is None else {"clip": self.models.clip}

    def restore(self, snap: dict[str, Any]) -> None:
        if self.models is not None and "clip" in snap:
            self.models.clip = float(snap["clip"])


def accountant():
    """tasks.privacy.accountant, imported by the first run with noise: it imports autodp and SciPy (about a second
    of CPU), which a run without noise would otherwise pay for in every process that builds a server."""
    from tasks.privacy import accountant as module

    return module
