"""The round logic, without Ray: a host of logical clients, and the server loop that drives them.

`ClientHost` is what a client actor runs; `Server` is what the coordinator actor runs. Both are plain
objects, so the same round runs in one process (`run_in_process`: the tests' harness and the benchmarks'
bare-loop floor) and on Ray (orchestrator/actors.py), with the same numbers: every random draw comes from
(run seed, round, client id), and updates are folded in client-id order.
"""
from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from orchestrator.buffered import BufferedAggregation, run_version
from orchestrator.client_store import ClientStateStore
from orchestrator.participation import Participation
from orchestrator.phases import Phases
from tasks.algorithms import ALGORITHMS, Algorithm, ClientUpdate, RoundContext, Setup, TrainSettings
from tasks.algorithms.base import (
    State,
    count_correct,
    derive_seed,
    derive_seeds,
    nbytes,
    seeded_generator,
    to_device,
)
from tasks.algorithms.diagnostics import probe_inputs, round_diagnostics
from tasks.algorithms.engines import ClientRound, choose_engine, train_vectorized
from tasks.data.federated import FederatedData
from tasks.privacy.model_updates import private_client_update
from tasks.privacy.server import ServerPrivacy

SAMPLING_STREAM = 0x5A3
EVAL_STREAM = 0xE7A
SETUP_STREAM = 0x5E7


def train_settings(cfg) -> TrainSettings:
    t = cfg.train
    return TrainSettings(
        rounds=t.rounds, local_epochs=t.local_epochs, local_steps=t.local_steps, batch_size=t.batch_size,
        drop_last=t.drop_last, optimizer=t.optimizer.name, lr=t.optimizer.lr, momentum=t.optimizer.momentum,
        weight_decay=t.optimizer.weight_decay, schedule=t.lr_schedule.name, gamma=t.lr_schedule.gamma,
        grad_clip=t.grad_clip,
    )


def build_algorithm(cfg, num_classes: int, input_shape: tuple[int, ...]) -> Algorithm:
    setup = Setup(num_classes=num_classes, input_shape=tuple(input_shape), num_clients=cfg.data.num_clients,
                  model_name=cfg.model.name, model_options=cfg.model.options, model_init=cfg.model.init,
                  model_head_init=cfg.model.head_init, train=train_settings(cfg), seed=cfg.seed,
                  stats_privacy=cfg.privacy_settings.stats)
    return ALGORITHMS.get(cfg.algorithm.name)(cfg.algorithm.params_for(), setup)


# ------------------------------------------------------------------------------------------ clients
class ClientHost:
    """Hosts many logical clients: their data shards and the state that persists between their rounds.

    It can also train a guest: a client hosted elsewhere, of a method whose clients keep no state
    (`keeps_client_state = False`), sent here to balance a round. A guest's data is built on demand (the
    last few are cached) and nothing of it stays.

    A hosted client's shard is built when it is first needed, and at most `resources.resident_clients` shards
    (and as many guests' ones) stay built, least recently used out: an actor of 50,000 clients would otherwise
    hold a copy of all their data beside the one in the object store. Building a shard again gives the same
    tensors, so this changes no result.

    Devices, in this one place: the hosted shards live on the host's device (a GPU: no copy per batch), a
    round's payload is moved there once, and whatever leaves the host (updates, contributions, client states,
    hence checkpoints) is moved back to the CPU, so the coordinator never holds a CUDA tensor."""

    def __init__(self, cfg, data: FederatedData, client_ids: list[int], client_states: dict[int, Any] | None = None,
                 device: str = "cpu", store: ClientStateStore | None = None):
        self.cfg = cfg
        self.device = torch.device(device)
        self.algorithm = build_algorithm(cfg, data.num_classes, data.input_shape)
        self.train = self.algorithm.setup.train
        self.federated = data
        self.global_tests: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.hosted = frozenset(client_ids)
        self.shards_kept = cfg.resources.resident_clients  # None: every shard stays once built
        self.shards: OrderedDict[int, Any] = OrderedDict()  # hosted clients' built shards, LRU order
        self.guests: OrderedDict[int, Any] = OrderedDict()
        # the hosted clients' persistent states (orchestrator/client_store.py): in memory, or spilled to disk
        self.states = store if store is not None else ClientStateStore()
        for cid, state in (client_states or {}).items():
            self.states.put(cid, state, 0)
        self.engine = choose_engine(cfg.train.engine, self.algorithm)
        self.model_dp = cfg.privacy_settings.models  # privacy.models: updates clipped (and noised) as they leave
        self._payload_received: Any = None
        self._payload_here: Any = None
        self._test_sets: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None

    def _build_data(self, cid: int):
        """A client's shard, on this host's device; personalized methods also see the global test set, one
        copy per domain shared by every client of that domain (not one per client: 1,000 clients would hold
        1,000 copies)."""
        data = to_device(self.federated.client_data(cid), self.device)
        if self.algorithm.capabilities().personalized:
            if data.domain not in self.global_tests:
                self.global_tests[data.domain] = to_device(self.federated.global_test(data.domain), self.device)
            data.global_x_test, data.global_y_test = self.global_tests[data.domain]
        return data

    def _here(self, payload):
        """The payload on this host's device, moved once for all the clients it is sent to."""
        if payload is not self._payload_received:
            self._payload_received, self._payload_here = payload, to_device(payload, self.device)
        return self._payload_here

    def _data(self, cid: int):
        if cid in self.hosted:
            return self._cached(self.shards, cid, self.shards_kept)
        if self.algorithm.capabilities().keeps_client_state:
            raise KeyError(f"client {cid} is not hosted here and {self.algorithm.name} keeps client state")
        # at most as much guest data as own data
        return self._cached(self.guests, cid, max(1, min(len(self.hosted), self.shards_kept or len(self.hosted))))

    def _cached(self, cache: OrderedDict, cid: int, limit: int | None):
        if cid in cache:
            cache.move_to_end(cid)
        else:
            cache[cid] = self._build_data(cid)
            if limit is not None and len(cache) > limit:
                cache.popitem(last=False)
        return cache[cid]

    def _state(self, cid: int, round_idx: int):
        """The client's state as round `round_idx` begins (an evaluation's round index is the rounds done)."""
        if cid not in self.hosted:
            return self.algorithm.init_client(self._data(cid))
        state = self.states.get(cid, upto=round_idx)
        if state is None:
            state = self.algorithm.init_client(self._data(cid))
            self.states.keep_fresh(cid, state)
        return state

    def _keep_state(self, cid: int, state, round_idx: int) -> None:
        """A method without client state is given back the state it started from (an empty one): nothing to write,
        so 100,000 clients of FedAvg leave no file each behind. One that returns a state all the same has it
        refused, not dropped."""
        if not self.algorithm.capabilities().keeps_client_state:
            if state:
                raise UndeclaredClientState(
                    f"{self.algorithm.name} returned a client state ({', '.join(map(str, state))}) but declares "
                    "keeps_client_state = False, so it would be dropped; declare keeps_client_state = True to keep it")
            return
        if cid in self.hosted:
            self.states.put(cid, to_device(state, "cpu"), round_idx + 1)

    def _context(self, cid: int, round_idx: int, seed_torch: bool = True,
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
                            generator=torch.Generator().manual_seed(generator_seed), device=self.device)

    def round_seeds(self, cids: list[int], round_idx: int) -> list[tuple[int, int]]:
        """Each client's (generator seed, torch seed) for the round: derive_seed(run seed, round, client[, 1]),
        derived for all the clients at once."""
        rows = np.array([[self.cfg.seed, round_idx, cid] for cid in cids], dtype=np.int64).reshape(-1, 3)
        torch_rows = np.column_stack([rows, np.ones(len(cids), dtype=np.int64)])
        return list(zip(derive_seeds(rows), derive_seeds(torch_rows)))

    def update(self, payload, cid: int, round_idx: int, seeds: tuple[int, int] | None = None) -> ClientUpdate:
        start = time.perf_counter()
        data = self._data(cid)
        update, state = self.algorithm.client_update(self._here(payload), data, self._state(cid, round_idx),
                                                     self._context(cid, round_idx, seeds=seeds))
        self._keep_state(cid, state, round_idx)
        update = self._private(to_device(update, "cpu"), payload, round_idx)
        update.metrics.setdefault("seconds", time.perf_counter() - start)
        return update

    def _private(self, update: ClientUpdate, payload, round_idx: int) -> ClientUpdate:
        if not self.model_dp.active:
            return update
        return private_client_update(update, payload, self.model_dp, self.cfg.seed, round_idx)

    def update_many(self, payload, cids: list[int], round_idx: int, errors: dict[int, str] | None = None,
                    summed: bool = False) -> dict[int, Any]:
        """The round's updates of `cids`: one after another (sequential), or trained together, one batch of
        clients per architecture (vectorized). With `errors`, a client that fails before or after training is
        left out and its error recorded there; without, it raises. `summed` (resources.partial_sums): the updates
        come back without their models, and one `PartialSum` per batch of them under PARTIAL_SUMS."""
        if self.engine == "sequential":
            seeds = self.round_seeds(cids, round_idx)
            updates = {cid: self.update(payload, cid, round_idx, seed) for cid, seed in zip(cids, seeds)}
            return sum_updates(updates, self.model_dp.active) if summed else updates
        start = time.perf_counter()
        updates, partials = {}, []
        for key, group in self._prepared_rounds(payload, cids, round_idx, errors).items():
            batch = train_vectorized(self.algorithm, self.algorithm.working_model(key=key), [r for _, r in group])
            if summed and self._sums_stacked():
                partial, summed_updates = self._summed_batch(group, batch)
                partials.append(partial)
                updates.update(summed_updates)
                continue
            for (cid, r), result in zip(group, batch.each()):
                update = guarded(errors, cid, lambda cid=cid, r=r, result=result: self._finish(payload, cid, r, result))
                if update is not None:
                    updates[cid] = update
        seconds = (time.perf_counter() - start) / max(1, len(cids))  # the clients' share of the batch's time
        for update in updates.values():
            update.metrics.setdefault("seconds", seconds)
        ordered = {cid: updates[cid] for cid in cids if cid in updates}
        if not summed:
            return ordered
        if self._sums_stacked():
            return {**ordered, PARTIAL_SUMS: partials}
        return sum_updates(ordered, self.model_dp.active)

    def _prepared_rounds(self, payload, cids: list[int], round_idx: int,
                         errors: dict[int, str] | None) -> dict[Any, list[tuple[int, ClientRound]]]:
        """The clients' rounds as the vectorized engine takes them, grouped by architecture (model key)."""
        rounds: dict[Any, list[tuple[int, ClientRound]]] = {}
        for cid, seeds in zip(cids, self.round_seeds(cids, round_idx)):
            prepared = guarded(errors, cid, lambda cid=cid, seeds=seeds: self._client_round(payload, cid, round_idx, seeds))
            if prepared is not None:
                rounds.setdefault(prepared.objective.model_key, []).append((cid, prepared))
        return rounds

    def _sums_stacked(self) -> bool:
        """Whether a partial sum can be taken straight from the stacked trained models: the method sends its
        trained model as it is (FedAvg's client_result) and keeps no client state."""
        capabilities = self.algorithm.capabilities()
        return (capabilities.uploads_trained_model and not capabilities.keeps_client_state
                and not self.model_dp.active)  # each update is clipped apart first

    @staticmethod
    def _summed_batch(group: list[tuple[int, ClientRound]], batch) -> tuple[PartialSum, dict[int, ClientUpdate]]:
        """One batch's partial sum, and its clients' updates without models, as FedAvg's client_result and
        `sum_updates` would make them."""
        sizes = [r.data.num_samples for _, r in group]
        sums, buffers = batch.weighted_sum([float(n) for n in sizes])
        model_bytes = sum(t[0].numel() * t.element_size() for t in batch.stacked.values()) * len(group)
        partial = PartialSum(min(cid for cid, _ in group), float(sum(sizes)), sums, buffers, model_bytes)
        updates = {cid: ClientUpdate(cid, n, metrics={"train_loss": loss})
                   for (cid, _), n, loss in zip(group, sizes, batch.losses)}
        return partial, updates

    def _client_round(self, payload, cid: int, round_idx: int, seeds: tuple[int, int]) -> ClientRound:
        data = self._data(cid)
        ctx = self._context(cid, round_idx, seed_torch=False, seeds=seeds)
        return ClientRound(data, ctx, self.algorithm.local_objective(self._here(payload), data,
                                                                     self._state(cid, round_idx), ctx))

    def _finish(self, payload, cid: int, r: ClientRound, result) -> ClientUpdate:
        update, state = self.algorithm.client_result(result.state, result.train_loss, self._here(payload), r.data,
                                                     self._state(cid, r.ctx.round), r.ctx)
        self._keep_state(cid, state, r.ctx.round)
        return self._private(to_device(update, "cpu"), payload, r.ctx.round)

    def call_many(self, method: str, payload, cids: list[int], round_idx: int) -> tuple[dict[int, Any], dict[int, str]]:
        """`method` ("pre_round", "update", "evaluate", "setup_contribution") for each client, in order:
        ({client: result}, {client: error}). A client that raises fails alone, with its error in one line; on the
        vectorized engine a failed batch of updates fails its clients together."""
        results: dict[int, Any] = {}
        errors: dict[int, str] = {}
        if method == SUMMED and self.engine == "sequential":
            results, errors = self.call_many("update", payload, cids, round_idx)
            return sum_updates(results, self.model_dp.active), errors
        if method in ("update", SUMMED) and self.engine != "sequential":
            try:
                return self.update_many(payload, cids, round_idx, errors, summed=method == SUMMED), errors
            except Exception as err:  # noqa: BLE001 - training failed: its clients fail together, the actor goes on
                return {}, {**{cid: one_line(err) for cid in cids}, **errors}
        seeds = dict(zip(cids, self.round_seeds(cids, round_idx))) if method == "update" else {}
        calls = {"pre_round": self.pre_round, "evaluate": self.evaluate,
                 "update": lambda payload, cid, round_idx: self.update(payload, cid, round_idx, seeds[cid]),
                 "setup_contribution": lambda _payload, cid, _round_idx: self.setup_contribution(cid)}
        for cid in cids:
            try:
                results[cid] = calls[method](payload, cid, round_idx)
            except Exception as err:  # noqa: BLE001 - any client failure is reported, never fatal to the actor
                errors[cid] = one_line(err)
        return results, errors

    def evaluate(self, payload, cid: int, round_idx: int) -> dict[str, tuple[float, float]]:
        data = self._data(cid)
        return to_device(self.algorithm.client_evaluate(self._here(payload), data, self._state(cid, round_idx),
                                                        self._context(cid, round_idx)), "cpu")

    def pre_round(self, payload, cid: int, round_idx: int):
        data = self._data(cid)
        return to_device(self.algorithm.client_pre_round(self._here(payload), data, self._state(cid, round_idx),
                                                         self._context(cid, round_idx)), "cpu")

    def setup_contribution(self, cid: int):
        contribution = self.algorithm.client_setup(self._data(cid), seeded_generator(self.cfg.seed, SETUP_STREAM, cid))
        return to_device(contribution, "cpu")

    def evaluate_global(self, state: State, batch_size: int) -> dict[str, float] | None:
        """The global model's accuracy on each global test set, computed on this host's device (the GPU where
        the run has one, rather than the coordinator's CPU); None for a method without a global model."""
        if self._test_sets is None:
            self._test_sets = to_device(self.federated.test_sets(), self.device)
        return accuracies_on_test_sets(self.algorithm, to_device(state, self.device), self._test_sets, batch_size,
                                       self.device)

    def placement(self) -> dict[str, Any]:
        """Where this host's tensors are: its clients' shards, and the working models that have trained (their
        parameters hold gradients; frozen and evaluation-only models have none)."""
        models = self.algorithm._model_cache.values()
        shard = self._data(min(self.hosted)) if self.hosted else None
        trained = {str(p.device) for m in models for p in m.parameters() if p.grad is not None}
        return {"data_device": str(shard.x.device) if shard is not None else None,
                "trained_model_devices": sorted(trained)}

    def client_states(self, cids: list[int] | None = None) -> dict[int, Any]:
        """The states of `cids` (default: every client with one), read back from disk where spilled."""
        return {cid: self.states[cid] for cid in (cids or self.states.clients()) if cid in self.states}

    def client_ids(self) -> list[int]:
        return sorted(self.hosted)

    def ping(self) -> bool:
        return True


def guarded(errors: dict[int, str] | None, cid: int, work):
    """work(), or None with its error recorded under `cid` in `errors`; without `errors`, an error raises."""
    if errors is None:
        return work()
    try:
        return work()
    except Exception as err:  # noqa: BLE001 - reported per client
        errors[cid] = one_line(err)
        return None


def one_line(err: Exception) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"


def client_costs(data: FederatedData, train) -> list[float]:
    """Each client's local work in optimizer steps (what balancing clients over actors weighs)."""
    if train.local_steps:
        return [float(train.local_steps)] * data.num_clients
    per_epoch = [(n // train.batch_size if train.drop_last else -(-n // train.batch_size)) for n in data.train_sizes()]
    return [float(max(1, steps) * train.local_epochs) for steps in per_epoch]


# ------------------------------------------------------------------------------------- partial sums
SUMMED = "update_summed"  # the "update" call whose results also hold partial sums (resources.partial_sums)
PARTIAL_SUMS = -1  # the results' key, never a client id, under which the partial sums come back


@dataclass
class PartialSum:
    """Some clients' models folded where they trained: Σ_k n_k·θ_k in float64 over those clients (taken in
    client-id order), Σ_k n_k, the non-float tensors of the first of them, and the bytes their models took."""

    first_client: int
    weight: float
    sums: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor]
    bytes_sent: int


def sum_updates(results: dict[int, ClientUpdate], uniform: bool = False) -> dict[int, Any]:
    """The updates without their model tensors, plus one `PartialSum` of them under PARTIAL_SUMS; `uniform`
    (privacy.models: clipped models): every client weighs 1 rather than its sample count."""
    cids = sorted(results)
    if not cids:
        return {PARTIAL_SUMS: []}
    first = results[cids[0]].tensors
    sums = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in first.items() if torch.is_floating_point(v)}
    weights = {cid: 1.0 if uniform else results[cid].num_samples for cid in cids}
    for cid in cids:
        update = results[cid]
        for key, acc in sums.items():
            acc += update.tensors[key].to(torch.float64) * weights[cid]
    partial = PartialSum(cids[0], float(sum(weights.values())), sums,
                         {k: v for k, v in first.items() if k not in sums}, sum(nbytes(results[c].tensors) for c in cids))
    stripped: dict[int, Any] = {cid: replace(results[cid], tensors={}) for cid in cids}
    stripped[PARTIAL_SUMS] = [partial]
    return stripped


def fold_partial_sums(partials: list[PartialSum], reference: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Σ over partials of their sums, in the order of their first clients, ÷ Σ of their weights, in each tensor's
    own dtype; non-float tensors from the partial of the lowest client id (as FedAvg takes its first client's)."""
    partials = sorted(partials, key=lambda p: p.first_client)
    total = sum(p.weight for p in partials)
    out = dict(partials[0].buffers)
    for key in partials[0].sums:
        acc = partials[0].sums[key].clone()
        for partial in partials[1:]:
            acc += partial.sums[key]
        out[key] = (acc / total).to(reference[key].dtype)
    return {key: out[key] for key in reference}


def sums_updates(algorithm: Algorithm, cfg) -> bool:
    """Whether this run's actors return partial sums: asked for, and the method's aggregation and round
    metrics are FedAvg's (a weighted mean of the client models, nothing else read from them)."""
    capabilities = algorithm.capabilities()
    return cfg.resources.partial_sums and capabilities.global_model and capabilities.averages_models


def accuracies_on_test_sets(algorithm: Algorithm, state: State,
                            test_sets: dict[str, tuple[torch.Tensor, torch.Tensor]], batch_size: int,
                            device: torch.device | str = "cpu") -> dict[str, float] | None:
    """{test set: accuracy} of the global model in `state`, evaluated on `device`; None without a global model."""
    model = algorithm.global_model(state)
    if model is None:
        return None
    model.to(device)
    return {name: count_correct(model, x, y, batch_size) / max(1, len(y)) for name, (x, y) in test_sets.items()}


# ------------------------------------------------------------------------------------------- server
class UndeclaredClientState(TypeError):
    """A method returned per-client state without declaring that it keeps any."""


class NonFiniteLoss(ValueError):
    """A client's training loss was NaN or infinite (train.on_nonfinite_loss = stop)."""


def check_finite_losses(results: dict[int, ClientUpdate], round_idx: int) -> None:
    """Before aggregation, so the global state stays the last finite one."""
    for cid in sorted(results):
        loss = results[cid].metrics.get("train_loss")
        if loss is not None and not math.isfinite(float(loss)):
            raise NonFiniteLoss(f"round {round_idx + 1}: client {cid} reported training loss {float(loss)}; lower "
                                "train.optimizer.lr (or set train.grad_clip), or set "
                                "train.on_nonfinite_loss=continue to go on regardless")


def sample_clients(seed: int, round_idx: int, num_clients: int, per_round: int) -> list[int]:
    """The clients of round t: uniform without replacement, from (seed, t) alone."""
    if per_round >= num_clients:
        return list(range(num_clients))
    rng = np.random.default_rng(derive_seed(seed, round_idx, SAMPLING_STREAM))
    return sorted(int(c) for c in rng.choice(num_clients, per_round, replace=False))


def personalized_eval_clients(seed: int, num_clients: int, sample: int | None) -> list[int]:
    """The clients whose own models are evaluated (eval.personalized_clients): all, or a sample drawn from the run
    seed alone, never the method, so every method of a seed is evaluated on the same clients (paired)."""
    if sample is None or sample >= num_clients:
        return list(range(num_clients))
    rng = np.random.default_rng(derive_seed(seed, EVAL_STREAM))
    return sorted(int(c) for c in rng.choice(num_clients, sample, replace=False))


# call(method, payload, client_ids, round) -> ({client: result}, failed clients): runs a ClientHost method
# ("pre_round", "update", "evaluate") for each client, in this process or on the client actors.
CallClients = Callable[[str, Any, list[int], int], tuple[dict[int, Any], list[int]]]


def in_process_calls(host: ClientHost) -> CallClients:
    def call(method: str, payload, cids: list[int], round_idx: int):
        if method == SUMMED:
            return host.update_many(payload, cids, round_idx, summed=True), []
        if method == "update":
            return host.update_many(payload, cids, round_idx), []
        return {c: getattr(host, method)(payload, c, round_idx) for c in cids}, []
    return call


class Server:
    """The global state and the round loop: sample, broadcast, collect, aggregate, evaluate."""

    def __init__(self, cfg, data: FederatedData):
        self.cfg = cfg
        self.algorithm = build_algorithm(cfg, data.num_classes, data.input_shape)
        self.test_sets = {k: xy for k, xy in data.test_sets().items() if len(xy[1])}  # none with test_fraction 0
        self.probe = probe_inputs(self.test_sets, cfg.eval.probe_per_class) if cfg.eval.diagnostics else None
        self.num_clients = data.num_clients
        self.eval_clients = personalized_eval_clients(cfg.seed, data.num_clients, cfg.eval.personalized_clients)
        self.round = 0
        self.state = self.algorithm.init_global()
        self.history: list[dict[str, Any]] = []
        self.bytes_total = 0
        self.set_up = not self.algorithm.capabilities().setup_exchange
        self.phases = Phases()  # where the rounds' time goes (`mooring run --profile`); never in the history
        self.summed = sums_updates(self.algorithm, cfg)
        # availability, speeds, deadlines, dropouts on a simulated clock (orchestrator/participation.py)
        sync = cfg.participation.active and cfg.participation.mode == "sync"
        self.participation = Participation(cfg, data) if sync else None
        # FedBuff-style asynchronous aggregation instead of rounds (orchestrator/buffered.py)
        self.buffered = BufferedAggregation(cfg, data) if cfg.participation.mode == "buffered" else None
        self.privacy = ServerPrivacy(cfg.privacy_settings, self.algorithm.name, cfg.seed, data.num_clients,
                                     cfg.clients_per_round)
        # (state) -> {test set: accuracy} or None: here on the CPU, unless the runtime evaluates where the
        # clients' compute is (orchestrator/actors.py: a client actor's GPU)
        self.global_accuracies: Callable[[State], dict[str, float] | None] = lambda state: accuracies_on_test_sets(
            self.algorithm, state, self.test_sets, self.cfg.eval.batch_size)

    # ------------------------------------------------------------------ checkpointable state
    def snapshot(self) -> dict[str, Any]:
        snap = {"round": self.round, "state": self.state, "history": self.history, "bytes_total": self.bytes_total,
                "set_up": self.set_up, "privacy": self.privacy.snapshot()}
        clock = self.participation or self.buffered
        return snap | ({"participation": clock.snapshot()} if clock else {})

    def restore(self, snap: dict[str, Any]) -> None:
        self.round, self.state, self.history = snap["round"], snap["state"], list(snap["history"])
        self.bytes_total, self.set_up = snap["bytes_total"], snap["set_up"]
        clock = self.participation or self.buffered
        if clock:
            clock.restore(snap["participation"])
        self.privacy.restore(snap.get("privacy", {}))

    # ------------------------------------------------------------------ one round
    def setup(self, contributions: list) -> None:
        self.state = self.algorithm.server_setup(self.state, contributions)
        self.set_up = True

    def run_round(self, call: CallClients) -> dict[str, Any]:
        if self.buffered is not None:
            return run_version(self, call)
        t, phase = self.round, self.phases
        with phase("round: sample, payload"):
            sampled = sample_clients(self.cfg.seed, t, self.num_clients, self.cfg.clients_per_round)
            payload = self.privacy.payload(self.algorithm.payload(self.state, t))
            plan = self.participation.plan(t, nbytes(payload)) if self.participation else None
            if plan is not None:  # the clients available, in time, not dropped out
                sampled = plan.kept
        cids, failed, pre_bytes = sampled, [], 0
        if self.algorithm.capabilities().pre_round_exchange:
            with phase("round: pre-round exchange"):
                contributions, failed = call("pre_round", payload, sampled, t)
                cids = sorted(contributions)  # a client that failed here sits this round out
                pre_bytes = nbytes([contributions[c] for c in cids])
                self.state = self.algorithm.server_pre_round(self.state, [contributions[c] for c in cids], t)
                payload = self.privacy.payload(self.algorithm.payload(self.state, t))
        with phase("round: clients' updates"):
            results, failed_training = call(SUMMED if self.summed else "update", payload, cids, t)
        with phase("round: aggregate"):
            partials = results.pop(PARTIAL_SUMS, [])
            if self.cfg.train.on_nonfinite_loss == "stop":
                check_finite_losses(results, t)
            updates = [results[c] for c in sorted(results)]
            before = self.state
            if self.summed and updates:
                self.state = {**self.state, "model": fold_partial_sums(partials, self.state["model"])}
            elif not self.summed:
                self.state = self.algorithm.aggregate(self.state, updates, t)
            self.state = self.privacy.private_state(self.state, updates, t, self.summed)
        self.round = t + 1
        with phase("round: metrics"):
            metrics = self._round_metrics(t, payload, sampled, updates, sorted(failed + failed_training),
                                          pre_bytes + sum(p.bytes_sent for p in partials))
            if self.cfg.eval.diagnostics:
                metrics.update(round_diagnostics(self.algorithm, before, self.state, updates, self.probe))
            metrics.update(self.privacy.metrics(self.round))
            if plan is not None:
                metrics.update(self.participation.close(plan, metrics, nbytes(payload)))
        if self._eval_due():
            with phase("round: evaluate"):
                metrics.update(self.evaluate(call))
        self.history.append(metrics)
        return metrics

    def _eval_due(self) -> bool:
        return self.round % self.cfg.eval.every == 0 or self.round == self.cfg.train.rounds

    def _round_metrics(self, t, payload, cids, updates: list[ClientUpdate], failed: list[int],
                       pre_round_bytes: int = 0) -> dict[str, Any]:
        bytes_down = nbytes(payload) * len(cids)
        bytes_up = sum(u.bytes_sent for u in updates) + pre_round_bytes
        self.bytes_total += bytes_down + bytes_up
        n = sum(u.num_samples for u in updates)
        losses = [(u.metrics.get("train_loss"), u.num_samples) for u in updates if "train_loss" in u.metrics]
        m: dict[str, Any] = {
            "round": t + 1, "clients": len(cids), "clients_failed": len(failed),
            "bytes_down": bytes_down, "bytes_up": bytes_up, "bytes_total": self.bytes_total,
        }
        if losses and n:
            m["train_loss"] = sum(loss * k for loss, k in losses) / max(1, sum(k for _, k in losses))
        m.update(self.algorithm.round_metrics(self.state, updates, t))
        return m

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, call: CallClients | None) -> dict[str, float]:
        out: dict[str, float] = {}
        accs = self.global_accuracies(self.state)
        if accs:  # None without a global model, {} without a global test set
            out["accuracy"] = float(np.mean(list(accs.values())))
            if len(accs) > 1:
                out["accuracy_worst"] = min(accs.values())
                out.update({f"accuracy_{k}": v for k, v in accs.items()})
        if self.algorithm.capabilities().personalized and call is not None:
            payload = self.algorithm.payload(self.state, self.round)
            per_client, _ = call("evaluate", payload, self.eval_clients, self.round)
            out.update(personalized_summary(per_client))
        return out


def personalized_summary(per_client: dict[int, dict[str, tuple[float, float]]]) -> dict[str, float]:
    """Sample-weighted accuracy per metric, plus its mean and spread across the clients evaluated (fairness),
    and how many clients that was."""
    out: dict[str, float] = {"personalized_clients": len(per_client)}
    metrics = sorted({k for res in per_client.values() for k in res})
    for key in metrics:
        pairs = [per_client[c][key] for c in sorted(per_client) if key in per_client[c]]
        correct, total = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
        per = [c / n for c, n in pairs if n > 0]
        name = "personalized_accuracy" if key == "acc" else f"personalized_{key}"
        out[name] = correct / total if total else float("nan")
        out[f"{name}_client_mean"] = float(np.mean(per)) if per else float("nan")
        out[f"{name}_client_std"] = float(np.std(per)) if per else float("nan")
    return out


# ------------------------------------------------------------------------------ one process, no Ray
def run_in_process(cfg, data: FederatedData, rounds: int | None = None, on_round=None,
                   states_dir: str | None = None) -> list[dict[str, Any]]:
    """The whole federated run in this process: one host for all clients, serially; with `states_dir`, the
    clients' states are written there and at most `resources.resident_clients` of them kept in memory."""
    store = ClientStateStore(states_dir, cfg.resources.resident_clients) if states_dir else None
    host = ClientHost(cfg, data, list(range(data.num_clients)), store=store)
    server = Server(cfg, data)
    if not server.set_up:
        server.setup([host.setup_contribution(c) for c in range(data.num_clients)])

    call = in_process_calls(host)
    for _ in range(cfg.train.rounds if rounds is None else rounds):
        metrics = server.run_round(call)
        if on_round is not None:
            on_round(metrics)
    return server.history
