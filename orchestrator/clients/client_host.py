"""What a client actor runs: a host of many logical clients, answering the server's typed calls.

A call (orchestrator/clients/client_calls.py) goes to the engine for updates (orchestrator/clients/client_engines.py) or to one
of the method's client hooks for the other kinds; the clients' data and state come from the host's cache
(orchestrator/clients/client_cache.py). Every random draw comes from (run seed, round, client id).

Devices, in this one place: the hosted shards live on the host's device (a GPU: no copy per batch), a round's
payload is moved there once, and whatever leaves the host (updates, contributions, client states, hence
checkpoints) is moved back to the CPU, so the coordinator never holds a CUDA tensor."""
from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np
import torch

from orchestrator.clients.client_cache import ClientCache
from orchestrator.clients.client_calls import CallKind, ClientCall, ClientResults
from orchestrator.clients.client_engines import SequentialEngine, VectorizedEngine
from orchestrator.clients.client_groups import ClientGroups
from orchestrator.clients.client_store import ClientStateStore
from orchestrator.clients.engine_host import ClientTurn, HostedCall
from orchestrator.clients.global_evaluation import accuracies_on_test_sets
from orchestrator.experiment.methods import build_algorithm
from tasks.algorithms import ClientUpdate, RoundContext
from tasks.algorithms.base import State, count_correct, derive_seeds, seeded_generator, to_device
from tasks.algorithms.ccvr import gaussian_stats
from tasks.algorithms.engines import run_engine
from tasks.algorithms.faults import method_hook
from tasks.algorithms.local_sgd import local_step_count
from tasks.data.federated import FederatedData
from tasks.privacy.model_updates import private_client_update
from tasks.robust.attacks import fixed_malicious, poisoned_data

SETUP_STREAM = 0x5E7


def data_poisoning(cfg, data: FederatedData):
    """threat: label_flip or backdoor: (shard) -> the shard as the threat leaves it; None for any other run."""
    threat = cfg.threat
    if threat is None or not threat.poisons_data:
        return None
    malicious = fixed_malicious(cfg.seed, data.num_clients, threat.fraction)
    return partial(poisoned_data, threat=threat, num_classes=data.num_classes, seed=cfg.seed, malicious=malicious)


class ClientHost:
    """Hosts many logical clients: their data shards and the state that persists between their rounds (its
    `cache`), and trains them with the run's engine. It can also train a guest: a client hosted elsewhere, of a
    method whose clients keep no state, sent here to balance a round."""

    def __init__(self, cfg, data: FederatedData, client_ids: list[int], client_states: dict[int, Any] | None = None,
                 device: str = "cpu", store: ClientStateStore | None = None):
        self.cfg = cfg
        self.device = torch.device(device)
        self.algorithm = build_algorithm(cfg, data.num_classes, data.input_shape)
        self.train = self.algorithm.setup.train
        self.federated = data
        self.cache = ClientCache(self.algorithm, data, client_ids, self.device, cfg.resources.resident_clients,
                                 store if store is not None else ClientStateStore(), data_poisoning(cfg, data),
                                 global_test=cfg.eval.global_test)
        for cid, state in (client_states or {}).items():
            self.cache.states.put(cid, state, 0)
        self.cache.prefetch()
        self.engine = run_engine(cfg, self.algorithm)
        # what trains together, whatever this host holds
        self.groups = ClientGroups.of_run(cfg, data, self.engine, self.algorithm)
        self.model_dp = cfg.privacy_settings.models  # privacy.models: updates clipped (and noised) as they leave
        self.trainer = (SequentialEngine() if self.engine == "sequential"
                        else VectorizedEngine(self.algorithm, self.model_dp.active))
        self._test_sets: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None

    @property
    def states(self) -> ClientStateStore:
        return self.cache.states

    # ------------------------------------------------------------------ calls
    def call(self, call: ClientCall) -> ClientResults:
        """The call for each of its clients, in order. A method's exception stops it as a MethodError naming the
        hook, client and round (tasks/algorithms/faults.py); any other error raises as it is (a full disk while a
        client's state is written is an I/O error, not a failed client)."""
        if call.kind is CallKind.UPDATE:
            return self.trainer.updates(self.hosted(call))
        if call.kind is CallKind.EVALUATE_GLOBAL:
            return ClientResults(self.evaluate_global_per_client(call.payload, call.client_ids, call.round))
        hook = {CallKind.SETUP: lambda cid: self.setup_contribution(cid),
                CallKind.PRE_ROUND: lambda cid: self.pre_round(call.payload, cid, call.round),
                CallKind.EVALUATE: lambda cid: self.evaluate(call.payload, cid, call.round),
                CallKind.CALIBRATE: lambda cid: self.calibration_stats(call.payload, cid)}[call.kind]
        # the round it happens in (0-based): set-up is before round 0, an evaluation's index is the rounds done
        round_idx = {CallKind.SETUP: -1, CallKind.EVALUATE: call.round - 1}.get(call.kind, call.round)
        results = {}
        for cid in call.client_ids:
            with method_hook(self.algorithm, round_idx, [cid]):
                results[cid] = hook(cid)
        return ClientResults(results)

    def hosted(self, call: ClientCall) -> HostedCall:
        """An UPDATE call as this host hands it to its engine: the payload on its device, the clients by group, each
        client's turn made as the engine takes it, and what becomes of an update as it leaves its client."""

        def turns(cids: list[int], seed_torch: bool) -> Iterator[ClientTurn]:
            for cid, seeds in zip(cids, self.round_seeds(cids, call.round)):
                started = time.perf_counter()
                data, state = self.cache.data(cid), self.cache.state(cid, call.round)
                yield ClientTurn(cid, data, state, self.context(cid, call.round, seed_torch, seeds), started)

        def leave(turn: ClientTurn, update: ClientUpdate, state: State, hook: str) -> ClientUpdate:
            self.cache.keep_state(turn.cid, state, call.round, hook)
            return self.private(to_device(update, "cpu"), call.payload, call.round)

        return HostedCall(self.algorithm, call.round, self.cache.here(call.payload), call.client_ids,
                          self.groups.split(call.client_ids), call.summed, self.model_dp.active, turns, leave)

    def private(self, update: ClientUpdate, payload, round_idx: int) -> ClientUpdate:
        """The update as it leaves its client: clipped (and noised) under privacy.models, else as it is."""
        if not self.model_dp.active:
            return update
        return private_client_update(update, payload, self.model_dp, self.cfg.seed, round_idx)

    def evaluate(self, payload, cid: int, round_idx: int) -> dict[str, tuple[float, float]]:
        data = self.cache.data(cid)
        return to_device(self.algorithm.client_evaluate(self.cache.here(payload), data, self.cache.state(cid, round_idx),
                                                        self.context(cid, round_idx)), "cpu")

    def evaluate_global_per_client(self, state: State, cids: list[int], rounds_done: int
                                   ) -> dict[int, tuple[int, int]]:
        """The global model in `state` on each client's own test split, on this host's device (eval.per_client):
        {client: (correct, total)}; {} for a method without a global model."""
        with method_hook(self.algorithm, rounds_done - 1, cids):
            model = self.algorithm.global_model(self.cache.here(state))
        if model is None:
            return {}
        model.to(self.device)
        batch_size = self.cfg.eval.batch_size
        return {cid: (count_correct(model, data.x_test, data.y_test, batch_size), len(data.y_test))
                for cid, data in ((cid, self.cache.data(cid)) for cid in cids)}

    def calibration_stats(self, payload, cid: int) -> State:
        """CCVR's class statistics of this client's training split under the payload's model."""
        data = self.cache.data(cid)
        model = self.algorithm.working_model(self.cache.here(payload)["model"], key="calibration", device=self.device)
        return gaussian_stats(model, data.x.to(self.device), data.y.to(self.device), data.num_classes)

    def pre_round(self, payload, cid: int, round_idx: int):
        data = self.cache.data(cid)
        return to_device(self.algorithm.client_pre_round(self.cache.here(payload), data,
                                                         self.cache.state(cid, round_idx),
                                                         self.context(cid, round_idx)), "cpu")

    def setup_contribution(self, cid: int):
        contribution = self.algorithm.client_setup(self.cache.data(cid),
                                                   seeded_generator(self.cfg.seed, SETUP_STREAM, cid))
        return to_device(contribution, "cpu")

    # ------------------------------------------------------------------ seeding
    def round_seeds(self, cids: list[int], round_idx: int) -> list[tuple[int, int]]:
        """Each client's (generator seed, torch seed) for the round: derive_seed(run seed, round, client[, 1]),
        derived for all the clients at once."""
        # derive_seed(a, b, c) is derive_seed(a, b, c, 0) (SeedSequence pads its pool with zeros): one call for both
        rows = np.array([[self.cfg.seed, round_idx, cid, stream] for stream in (0, 1) for cid in cids],
                        dtype=np.int64).reshape(-1, 4)
        seeds = derive_seeds(rows)
        return list(zip(seeds[:len(cids)], seeds[len(cids):]))

    def context(self, cid: int, round_idx: int, seed_torch: bool = True,
                seeds: tuple[int, int] | None = None) -> RoundContext:
        """`seeds`: the client's round seeds (its generator's, torch's global one's) where already derived
        (`round_seeds`)."""
        generator_seed, torch_seed = seeds or self.round_seeds([cid], round_idx)[0]
        if seed_torch:  # dropout and other torch-global draws (the vectorized engine refuses models that make any)
            if self.device.type == "cpu":
                torch.default_generator.manual_seed(torch_seed)  # torch.manual_seed's CPU part, without its CUDA hooks
            else:
                torch.manual_seed(torch_seed)
        return RoundContext(round=round_idx, seed=self.cfg.seed, train=self.train,
                            generator=torch.Generator().manual_seed(generator_seed), device=self.device,
                            local_steps=local_step_count(self.cache.data(cid).num_samples, self.train))

    # ------------------------------------------------------------------ the host itself
    def evaluate_global(self, state: State, batch_size: int) -> dict[str, float] | None:
        """The global model's accuracy on each global test set, computed on this host's device (the GPU where
        the run has one, rather than the coordinator's CPU); None for a method without a global model."""
        return accuracies_on_test_sets(self.algorithm, to_device(state, self.device), self._global_test_sets(),
                                       batch_size, self.device)

    def count_correct(self, state: State, shares: dict[str, tuple[int, int]], batch_size: int) -> dict[str, int]:
        """The global model's correct predictions on a share of each global test set ({name: (start, end)})."""
        model = self.algorithm.global_model(to_device(state, self.device))
        tests = self._global_test_sets()
        return {name: count_correct(model, tests[name][0][start:end], tests[name][1][start:end], batch_size)
                for name, (start, end) in shares.items()}

    def _global_test_sets(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        if self._test_sets is None:
            self._test_sets = to_device(self.federated.test_sets(), self.device)
        return self._test_sets

    def placement(self) -> dict[str, Any]:
        """Where this host's tensors are: its clients' shards, and the working models that have trained (their
        parameters hold gradients; frozen and evaluation-only models have none)."""
        models = self.algorithm._model_cache.values()
        shard = self.cache.data(min(self.cache.hosted)) if self.cache.hosted else None
        trained = {str(p.device) for m in models for p in m.parameters() if p.grad is not None}
        return {"data_device": str(shard.x.device) if shard is not None else None,
                "trained_model_devices": sorted(trained)}

    def client_states(self, cids: list[int] | None = None) -> dict[int, Any]:
        """The states of `cids` (default: every client with one), read back from disk where spilled."""
        states = self.cache.states
        return {cid: states[cid] for cid in (cids or states.clients()) if cid in states}

    def client_ids(self) -> list[int]:
        return sorted(self.cache.hosted)
