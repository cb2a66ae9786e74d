"""Buffered asynchronous aggregation (FedBuff), on the participation block's simulated clock
(participation.mode: buffered; docs/participation.md).

Up to `buffer.concurrency` clients train at any time, each from the global version it was sent. Their arrivals are
events ordered by simulated time, ties broken by client id; every `buffer.size` arrivals the server folds the
buffered updates into a new version:

    θ ← θ + server_lr · Σ_i s(τ_i)·n_i·(θ_i − θ_{v_i}) / Σ_i n_i

with θ_{v_i} the version client i started from, τ_i = (current version − v_i) its staleness, s(τ) = 1 (constant)
or (1 + τ)^−exponent (polynomial), n_i its samples. A fold of fresh updates with server_lr 1 is FedAvg's weighted
mean. One version is one entry of the history ("round"). A client whose slot frees is replaced at once by an
available client drawn from (seed, version, slot), never one in flight or already sent this version, so every
(version, client) pair trains once and its seeds are derive_seed(seed, version, client), as in a round.

A client is trained when its arrival is processed, from the payload of its version (kept while it is in flight):
the same numbers as training it when it was sent, since its round depends only on that payload and its seeds.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import torch

from orchestrator.clients.client_calls import CallKind, ClientCall
from orchestrator.server.participation import DROPOUT_STREAM, Participation, uniforms
from tasks.algorithms.base import ClientUpdate, State, derive_seed

DISPATCH_STREAM = 0xB0F


# ------------------------------------------------------------------------------------------ events
class Outcome(str, Enum):
    ARRIVES = "arrives"
    DROPS = "drops"  # dropped out mid-training
    LATE = "late"  # would finish after the deadline: given up on at the deadline


@dataclass(frozen=True, order=True)
class Arrival:
    """A client's end of training: ordered by simulated time, then client id."""

    time: float
    client: int
    version: int = 0  # the version it was sent
    outcome: Outcome = Outcome.ARRIVES


class EventQueue:
    """The clients in flight, their arrivals popped in (time, client id) order."""

    def __init__(self, events: list[Arrival] | None = None):
        self.heap = list(events or [])
        heapq.heapify(self.heap)

    def push(self, event: Arrival) -> None:
        heapq.heappush(self.heap, event)

    def pop(self) -> Arrival:
        return heapq.heappop(self.heap)

    def clients(self) -> set[int]:
        return {e.client for e in self.heap}

    def versions(self) -> set[int]:
        return {e.version for e in self.heap}

    def __len__(self) -> int:
        return len(self.heap)


# -------------------------------------------------------------------------------------------- fold
def staleness_weight(staleness: int, kind: str, exponent: float) -> float:
    return 1.0 if kind == "constant" else (1.0 + staleness) ** -exponent


def fold_buffer(model: State, updates: list[tuple[ClientUpdate, State, float]], server_lr: float) -> State:
    """θ + server_lr · Σ_i w_i·n_i·(θ_i − θ_start_i) / Σ_i n_i over (update, its starting model, w_i), in the
    given order, in float64, each tensor back in its dtype; non-float tensors from the first update."""
    total = float(sum(u.num_samples for u, _, _ in updates))
    out: State = {}
    for key, ref in model.items():
        if not torch.is_floating_point(ref):
            out[key] = updates[0][0].tensors[key].clone()
            continue
        acc = torch.zeros_like(ref, dtype=torch.float64)
        for update, start, weight in updates:
            delta = update.tensors[key].to(torch.float64) - start[key].to(torch.float64)
            acc += delta * (weight * update.num_samples / total)
        out[key] = (ref.to(torch.float64) + server_lr * acc).to(ref.dtype)
    return out


# ------------------------------------------------------------------------------------------ server
class BufferedAggregation:
    """The asynchronous server's clock, clients in flight and the models they started from."""

    def __init__(self, cfg, data):
        self.cfg, self.seed = cfg.participation, cfg.seed
        self.participation = Participation(cfg, data)  # availability, systems, the simulated clock
        self.queue = EventQueue()
        self.models: dict[int, State] = {}  # version → its global model, while a client sent it is in flight
        self.sent_this_version: set[int] = set()

    # ------------------------------------------------------------------ dispatch
    def dispatch(self, version: int, state: State, payload_bytes: int) -> None:
        """Fill the free slots with available clients, drawn from (seed, version, how many were sent)."""
        free = self.cfg.buffer.concurrency - len(self.queue)
        if free <= 0:
            return
        busy = self.queue.clients() | self.sent_this_version
        available = self.participation.availability.available(version, self.participation.clock)
        idle = [c for c in available if c not in busy]
        if not idle:
            return
        rng = np.random.default_rng(derive_seed(self.seed, DISPATCH_STREAM, version, len(self.sent_this_version)))
        chosen = sorted(idle[i] for i in rng.choice(len(idle), min(free, len(idle)), replace=False))
        upload = payload_bytes if self.participation.upload_bytes is None else self.participation.upload_bytes
        seconds = self.participation.systems.seconds(chosen, payload_bytes + upload).tolist()
        drops = uniforms(self.seed, DROPOUT_STREAM, version, np.asarray(chosen, dtype=np.int64)).tolist()
        for cid, took, u in zip(chosen, seconds, drops):
            self.queue.push(self.arrival(cid, version, took, u < self.cfg.dropout))
        self.models.setdefault(version, state["model"])
        self.sent_this_version |= set(chosen)

    def arrival(self, cid: int, version: int, seconds: float, dropped: bool) -> Arrival:
        deadline = self.cfg.deadline
        if dropped:
            return Arrival(self.participation.clock + seconds, cid, version, Outcome.DROPS)
        if deadline is not None and seconds > deadline:
            return Arrival(self.participation.clock + deadline, cid, version, Outcome.LATE)
        return Arrival(self.participation.clock + seconds, cid, version)

    # ------------------------------------------------------------------ one version
    def collect(self, version: int, state: State, payload_bytes: int) -> tuple[list[Arrival], dict[str, int]]:
        """Events in order until `buffer.size` arrivals (each freed slot refilled at once); with nobody in flight
        and nobody available, the clock moves on by idle_seconds and the version folds what it has."""
        arrived: list[Arrival] = []
        counts = {"clients_dropped": 0, "clients_late": 0}
        self.dispatch(version, state, payload_bytes)
        while len(arrived) < self.cfg.buffer.size:
            if not len(self.queue):
                self.participation.clock += self.cfg.idle_seconds
                break
            event = self.queue.pop()
            self.participation.clock = event.time
            if event.outcome is Outcome.ARRIVES:
                arrived.append(event)
            else:
                counts["clients_dropped" if event.outcome is Outcome.DROPS else "clients_late"] += 1
            self.dispatch(version, state, payload_bytes)
        return arrived, counts

    def new_version(self, state: State, arrived: list[Arrival], updates: dict[int, ClientUpdate],
                    version: int) -> State:
        kept = [(updates[e.client], self.models[e.version],
                 staleness_weight(version - e.version, self.cfg.buffer.staleness, self.cfg.buffer.exponent))
                for e in arrived if e.client in updates]
        if not kept:
            return state
        return {**state, "model": fold_buffer(state["model"], kept, self.cfg.buffer.server_lr)}

    def forget_unused(self, version: int) -> None:
        """Drop the models no client in flight started from; a new version sends to nobody yet."""
        live = self.queue.versions() | {version}
        self.models = {v: m for v, m in self.models.items() if v in live}
        self.sent_this_version = set()

    # ------------------------------------------------------------------ checkpoint
    def snapshot(self) -> dict[str, Any]:
        return {**self.participation.snapshot(), "events": [[e.time, e.client, e.version, e.outcome.value] for e in self.queue.heap],
                "models": {str(v): m for v, m in self.models.items()}, "sent": sorted(self.sent_this_version)}

    def restore(self, snap: dict[str, Any]) -> None:
        self.participation.restore(snap)
        self.queue = EventQueue([Arrival(float(t), int(c), int(v), Outcome(o)) for t, c, v, o in snap["events"]])
        self.models = {int(v): m for v, m in snap["models"].items()}
        self.sent_this_version = set(snap["sent"])


def run_version(server, call) -> dict[str, Any]:
    """One version of the buffered server (Server.run_round in buffered mode): collect, train, fold, log."""
    from tasks.algorithms.base import nbytes

    t, buffered = server.round, server.buffered
    clock = buffered.participation
    payload = server.algorithm.payload(server.state, t)
    start, payload_bytes = clock.clock, nbytes(payload)
    arrived, counts = buffered.collect(t, server.state, payload_bytes)
    updates: dict[int, ClientUpdate] = {}
    failed: list[int] = []
    for version in sorted({e.version for e in arrived}):
        cids = sorted(e.client for e in arrived if e.version == version)
        trained = call(ClientCall(CallKind.UPDATE, {"model": buffered.models[version]}, cids, version))
        updates.update(trained.results)
        failed += trained.failed
    server.state = buffered.new_version(server.state, arrived, updates, t)
    server.round = t + 1
    folded = [updates[e.client] for e in arrived if e.client in updates]
    metrics = server._round_metrics(t, payload_bytes, [e.client for e in arrived], folded, sorted(failed))
    staleness = [t - e.version for e in arrived]
    if folded:
        clock.upload_bytes = metrics["bytes_up"] / len(folded)
    metrics.update(counts, staleness_mean=float(np.mean(staleness)) if staleness else 0.0,
                   staleness_max=max(staleness, default=0), simulated_round_seconds=clock.clock - start,
                   simulated_seconds=clock.clock)
    buffered.forget_unused(server.round)
    if server.eval_due():
        metrics.update(server.evaluate(call))
    server.history.append(metrics)
    return metrics
