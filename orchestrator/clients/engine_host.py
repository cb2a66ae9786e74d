"""What an engine (orchestrator/clients/client_engines.py) asks of the host that runs it: the method, the
clients' data and states (`cache`), each client's round seeds and context, one client's sequential update, and the
privacy step an update takes as it leaves its client. `ClientHost` (orchestrator/clients/client_host.py) is the one
host; naming the engine's view of it here keeps the engines from importing the host that imports them."""
from __future__ import annotations

from typing import Protocol

from orchestrator.clients.client_cache import ClientCache
from tasks.algorithms import Algorithm, ClientUpdate, RoundContext
from tasks.privacy.settings import ModelDP


class EngineHost(Protocol):
    algorithm: Algorithm
    cache: ClientCache
    model_dp: ModelDP  # privacy.models: each update clipped (and noised) as it leaves its client

    def update(self, payload, cid: int, round_idx: int, seeds: tuple[int, int] | None = None) -> ClientUpdate: ...

    def round_seeds(self, cids: list[int], round_idx: int) -> list[tuple[int, int]]: ...

    def context(self, cid: int, round_idx: int, seed_torch: bool = True,
                seeds: tuple[int, int] | None = None) -> RoundContext: ...

    def private(self, update: ClientUpdate, payload, round_idx: int) -> ClientUpdate: ...
