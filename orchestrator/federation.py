"""The round logic, without Ray: a host of logical clients, and the server loop that drives them.

`ClientHost` is what a client actor runs; `Server` is what the coordinator actor runs. Both are plain
objects, so the same round runs in one process (`run_in_process`: the tests' harness and the benchmarks'
bare-loop floor) and on Ray (orchestrator/actors.py), with the same numbers: every random draw comes from
(run seed, round, client id), and updates are folded in client-id order.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from tasks.algorithms import ALGORITHMS, Algorithm, ClientUpdate, RoundContext, Setup, TrainSettings
from tasks.algorithms.base import count_correct, derive_seed, nbytes, seeded_generator
from tasks.data.federated import FederatedData

SAMPLING_STREAM = 0x5A3
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
                  model_name=cfg.model.name, model_options=cfg.model.options, train=train_settings(cfg), seed=cfg.seed)
    return ALGORITHMS.get(cfg.algorithm.name)(cfg.algorithm.params_for(), setup)


# ------------------------------------------------------------------------------------------ clients
class ClientHost:
    """Hosts many logical clients: their data shards and the state that persists between their rounds.

    It can also train a guest: a client hosted elsewhere, of a method whose clients keep no state
    (`keeps_client_state = False`), sent here to balance a round. A guest's data is built on demand (the
    last few are cached) and nothing of it stays."""

    def __init__(self, cfg, data: FederatedData, client_ids: list[int], client_states: dict[int, Any] | None = None,
                 device: str = "cpu"):
        self.cfg = cfg
        self.device = torch.device(device)
        self.algorithm = build_algorithm(cfg, data.num_classes, data.input_shape)
        self.train = self.algorithm.setup.train
        self.federated = data
        self.global_tests: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.data = {cid: self._build_data(cid) for cid in client_ids}
        self.guests: OrderedDict[int, Any] = OrderedDict()
        self.states: dict[int, Any] = dict(client_states or {})

    def _build_data(self, cid: int):
        """A client's shard; personalized methods also see the global test set, one copy per domain shared by
        every client of that domain (not one per client: 1,000 clients would hold 1,000 copies)."""
        data = self.federated.client_data(cid)
        if self.algorithm.personalized:
            if data.domain not in self.global_tests:
                self.global_tests[data.domain] = self.federated.global_test(data.domain)
            data.global_x_test, data.global_y_test = self.global_tests[data.domain]
        return data

    def _data(self, cid: int):
        if cid in self.data:
            return self.data[cid]
        if self.algorithm.keeps_client_state:
            raise KeyError(f"client {cid} is not hosted here and {self.algorithm.name} keeps client state")
        if cid not in self.guests:
            self.guests[cid] = self._build_data(cid)
            if len(self.guests) > max(1, len(self.data)):  # at most as much guest data as own data
                self.guests.popitem(last=False)
        return self.guests[cid]

    def _state(self, cid: int):
        if cid not in self.data:
            return self.algorithm.init_client(self.guests[cid])
        if cid not in self.states:
            self.states[cid] = self.algorithm.init_client(self.data[cid])
        return self.states[cid]

    def _context(self, cid: int, round_idx: int) -> RoundContext:
        torch.manual_seed(derive_seed(self.cfg.seed, round_idx, cid, 1))  # dropout and other torch-global draws
        return RoundContext(round=round_idx, seed=self.cfg.seed, train=self.train,
                            generator=seeded_generator(self.cfg.seed, round_idx, cid), device=self.device)

    def update(self, payload, cid: int, round_idx: int) -> ClientUpdate:
        start = time.perf_counter()
        data = self._data(cid)
        update, state = self.algorithm.client_update(payload, data, self._state(cid), self._context(cid, round_idx))
        if cid in self.data:
            self.states[cid] = state
        update.metrics.setdefault("seconds", time.perf_counter() - start)
        return update

    def evaluate(self, payload, cid: int, round_idx: int) -> dict[str, tuple[float, float]]:
        data = self._data(cid)
        return self.algorithm.client_evaluate(payload, data, self._state(cid), self._context(cid, round_idx))

    def pre_round(self, payload, cid: int, round_idx: int):
        data = self._data(cid)
        return self.algorithm.client_pre_round(payload, data, self._state(cid), self._context(cid, round_idx))

    def setup_contribution(self, cid: int):
        return self.algorithm.client_setup(self._data(cid), seeded_generator(self.cfg.seed, SETUP_STREAM, cid))

    def client_states(self, cids: list[int] | None = None) -> dict[int, Any]:
        return {cid: self.states[cid] for cid in (cids or self.states) if cid in self.states}

    def client_ids(self) -> list[int]:
        return sorted(self.data)

    def ping(self) -> bool:
        return True


def client_costs(data: FederatedData, train) -> list[float]:
    """Each client's local work in optimizer steps (what balancing clients over actors weighs)."""
    if train.local_steps:
        return [float(train.local_steps)] * data.num_clients
    per_epoch = [(n // train.batch_size if train.drop_last else -(-n // train.batch_size)) for n in data.train_sizes()]
    return [float(max(1, steps) * train.local_epochs) for steps in per_epoch]


# ------------------------------------------------------------------------------------------- server
def sample_clients(seed: int, round_idx: int, num_clients: int, per_round: int) -> list[int]:
    """The clients of round t: uniform without replacement, from (seed, t) alone."""
    if per_round >= num_clients:
        return list(range(num_clients))
    rng = np.random.default_rng(derive_seed(seed, round_idx, SAMPLING_STREAM))
    return sorted(int(c) for c in rng.choice(num_clients, per_round, replace=False))


# call(method, payload, client_ids, round) -> ({client: result}, failed clients): runs a ClientHost method
# ("pre_round", "update", "evaluate") for each client, in this process or on the client actors.
CallClients = Callable[[str, Any, list[int], int], tuple[dict[int, Any], list[int]]]


def in_process_calls(host: ClientHost) -> CallClients:
    def call(method: str, payload, cids: list[int], round_idx: int):
        return {c: getattr(host, method)(payload, c, round_idx) for c in cids}, []
    return call


class Server:
    """The global state and the round loop: sample, broadcast, collect, aggregate, evaluate."""

    def __init__(self, cfg, data: FederatedData):
        self.cfg = cfg
        self.algorithm = build_algorithm(cfg, data.num_classes, data.input_shape)
        self.test_sets = data.test_sets()
        self.num_clients = data.num_clients
        self.round = 0
        self.state = self.algorithm.init_global()
        self.history: list[dict[str, Any]] = []
        self.bytes_total = 0
        self.set_up = not self.algorithm.needs_setup

    # ------------------------------------------------------------------ checkpointable state
    def snapshot(self) -> dict[str, Any]:
        return {"round": self.round, "state": self.state, "history": self.history, "bytes_total": self.bytes_total,
                "set_up": self.set_up}

    def restore(self, snap: dict[str, Any]) -> None:
        self.round, self.state, self.history = snap["round"], snap["state"], list(snap["history"])
        self.bytes_total, self.set_up = snap["bytes_total"], snap["set_up"]

    # ------------------------------------------------------------------ one round
    def setup(self, contributions: list) -> None:
        self.state = self.algorithm.server_setup(self.state, contributions)
        self.set_up = True

    def run_round(self, call: CallClients) -> dict[str, Any]:
        t = self.round
        sampled = sample_clients(self.cfg.seed, t, self.num_clients, self.cfg.clients_per_round)
        payload = self.algorithm.payload(self.state, t)
        cids, failed, pre_bytes = sampled, [], 0
        if self.algorithm.pre_round_exchange:
            contributions, failed = call("pre_round", payload, sampled, t)
            cids = sorted(contributions)  # a client that failed here sits this round out
            pre_bytes = nbytes([contributions[c] for c in cids])
            self.state = self.algorithm.server_pre_round(self.state, [contributions[c] for c in cids], t)
            payload = self.algorithm.payload(self.state, t)
        results, failed_training = call("update", payload, cids, t)
        updates = [results[c] for c in sorted(results)]
        self.state = self.algorithm.aggregate(self.state, updates, t)
        self.round = t + 1
        metrics = self._round_metrics(t, payload, sampled, updates, sorted(failed + failed_training), pre_bytes)
        if self._eval_due():
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
        model = self.algorithm.global_model(self.state)
        if model is not None:
            accs = {name: count_correct(model, x, y, self.cfg.eval.batch_size) / max(1, len(y))
                    for name, (x, y) in self.test_sets.items()}
            out["accuracy"] = float(np.mean(list(accs.values())))
            if len(accs) > 1:
                out["accuracy_worst"] = min(accs.values())
                out.update({f"accuracy_{k}": v for k, v in accs.items()})
        if self.algorithm.personalized and call is not None:
            payload = self.algorithm.payload(self.state, self.round)
            per_client, _ = call("evaluate", payload, list(range(self.num_clients)), self.round)
            out.update(personalized_summary(per_client))
        return out


def personalized_summary(per_client: dict[int, dict[str, tuple[float, float]]]) -> dict[str, float]:
    """Sample-weighted accuracy per metric, plus its mean and spread across clients (fairness)."""
    out: dict[str, float] = {}
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
def run_in_process(cfg, data: FederatedData, rounds: int | None = None, on_round=None) -> list[dict[str, Any]]:
    """The whole federated run in this process: one host for all clients, serially."""
    host = ClientHost(cfg, data, list(range(data.num_clients)))
    server = Server(cfg, data)
    if not server.set_up:
        server.setup([host.setup_contribution(c) for c in range(data.num_clients)])

    call = in_process_calls(host)
    for _ in range(cfg.train.rounds if rounds is None else rounds):
        metrics = server.run_round(call)
        if on_round is not None:
            on_round(metrics)
    return server.history
