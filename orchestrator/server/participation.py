"""Clients as they are, on a simulated clock: who is available when a round starts, how fast each client
computes and transmits, which of the round's clients make its deadline, and how long the round takes
(docs/participation.md).

Every draw comes from (run seed, stream, [round,] client), so a round's plan is the same wherever and however
often it is computed. It is decided before any client trains: a client's simulated time follows from its local
steps and the bytes it moves, not from running it. A client that drops out, is late, or finishes after the first
K is therefore not trained at all, which is exactly what discarding its work leaves: its update never reaches
the server and its client state does not advance.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchestrator.clients.client_work import client_costs
from orchestrator.experiment.participation_settings import read_availability_trace, read_system_trace
from orchestrator.server.sampling import sample_clients
from tasks.algorithms.base import derive_seeds

AVAILABILITY_STREAM = 0xA7A
PHASE_STREAM = 0x9A5
SPEED_STREAM = 0x5BD
BANDWIDTH_STREAM = 0xBA4
DROPOUT_STREAM = 0xD20


def uniforms(seed: int, stream: int, *parts: np.ndarray | int) -> np.ndarray:
    """A uniform in [0, 1) per row of (seed, stream, *parts): derive_seed's 63 bits, scaled."""
    columns = np.broadcast_arrays(*(np.asarray(p, dtype=np.int64) for p in (seed, stream, *parts)))
    rows = np.stack([c.reshape(-1) for c in columns], axis=1)
    return np.array(derive_seeds(rows), dtype=np.float64) * 2.0**-63


def spread(median: float, sigma: float, seed: int, stream: int, num_clients: int) -> np.ndarray:
    """median × exp(sigma·z_c) per client, z_c standard normal (Box-Muller) from (seed, stream, client)."""
    if sigma == 0:
        return np.full(num_clients, float(median))
    cids = np.arange(num_clients)
    u1, u2 = uniforms(seed, stream, cids, 0), uniforms(seed, stream, cids, 1)
    z = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)
    return median * np.exp(sigma * z)


# ------------------------------------------------------------------------------------ client systems
@dataclass(frozen=True)
class ClientSystems:
    """Each client's local steps per round, compute speed (steps/s) and bandwidth (bytes/s)."""

    steps: np.ndarray
    speed: np.ndarray
    bandwidth: np.ndarray

    def seconds(self, cids: list[int], bytes_moved: float) -> np.ndarray:
        """Simulated seconds of each client's round: its steps at its speed, `bytes_moved` at its bandwidth."""
        idx = np.asarray(cids, dtype=np.int64)
        return self.steps[idx] / self.speed[idx] + bytes_moved / self.bandwidth[idx]


def client_systems(cfg, data) -> ClientSystems:
    system = cfg.participation.system
    n = data.num_clients
    if system.trace is not None:
        table = read_system_trace(system.trace)
        speed = np.array([table[c][0] for c in range(n)])
        bandwidth = np.array([table[c][1] for c in range(n)])
    else:
        speed = spread(system.speed.median, system.speed.sigma, cfg.seed, SPEED_STREAM, n)
        bandwidth = spread(system.bandwidth.median, system.bandwidth.sigma, cfg.seed, BANDWIDTH_STREAM, n)
    if system.slow_classes:
        factor = 1.0 - (1.0 - system.slow_factor) * slow_class_shares(data, system.slow_classes)
        speed, bandwidth = speed * factor, bandwidth * factor
    return ClientSystems(np.array(client_costs(data, cfg.train)), speed, bandwidth)


def slow_class_shares(data, classes: list[int]) -> np.ndarray:
    """Each client's share of training samples whose label is in `classes`."""
    labels = np.asarray(data.dataset.y_train)
    return np.array([float(np.isin(labels[idx], classes).mean()) if len(idx) else 0.0
                     for idx in data.partition.train])


# -------------------------------------------------------------------------------------- availability
class Availability:
    """Which clients can be sampled at round `t`, the clock at `now` simulated seconds."""

    def __init__(self, cfg, num_clients: int):
        self.cfg, self.seed, self.num_clients = cfg.participation.availability, cfg.seed, num_clients
        cids = np.arange(num_clients)
        self.phase = uniforms(cfg.seed, PHASE_STREAM, cids) if self.cfg.kind == "diurnal" else None
        self.trace = read_availability_trace(self.cfg.trace) if self.cfg.kind == "trace" else None

    def available(self, round_idx: int, now: float) -> list[int]:
        kind, cids = self.cfg.kind, np.arange(self.num_clients)
        if kind == "always":
            return cids.tolist()
        if kind == "bernoulli":
            mask = uniforms(self.seed, AVAILABILITY_STREAM, round_idx, cids) < self.cfg.probability
        elif kind == "diurnal":
            mask = np.mod(now / self.cfg.period + self.phase, 1.0) < self.cfg.online_fraction
        else:
            mask = np.array([self._in_trace(c, now) for c in range(self.num_clients)], dtype=bool)
        return cids[mask].tolist()

    def _in_trace(self, cid: int, now: float) -> bool:
        at = now % self.cfg.trace_period if self.cfg.trace_period else now
        return any(start <= at < end for start, end in self.trace.get(cid, ()))


# ------------------------------------------------------------------------------------------ a round
@dataclass
class RoundPlan:
    """Who a round selected and what became of them; `seconds` is its simulated duration."""

    available: int
    selected: list[int]
    kept: list[int]                 # in time and among the first K to finish: trained and aggregated
    dropped: list[int] = field(default_factory=list)   # dropped out mid-round
    late: list[int] = field(default_factory=list)      # would have finished after the deadline
    unused: list[int] = field(default_factory=list)    # finished in time, after the first K (over-selection)
    seconds: float = 0.0


def plan_round(selected: list[int], finish: dict[int, float], dropped: set[int], wanted: int,
               deadline: float | None, idle_seconds: float, available: int) -> RoundPlan:
    """The first `wanted` of the selected clients to finish (ties by client id) within the deadline are kept.
    The round ends when the last kept client arrives if `wanted` did; otherwise at the deadline, or without one
    when the last client still running arrives; with nobody to wait for, after the deadline or `idle_seconds`."""
    running = sorted((finish[c], c) for c in selected if c not in dropped)
    in_time = [(t, c) for t, c in running if deadline is None or t <= deadline]
    kept = in_time[:wanted]
    if kept and len(kept) == wanted:
        seconds = kept[-1][0]
    elif deadline is not None:
        seconds = deadline
    else:
        seconds = kept[-1][0] if kept else idle_seconds
    return RoundPlan(available=available, selected=list(selected), kept=sorted(c for _, c in kept),
                     dropped=sorted(dropped & set(selected)),
                     late=sorted(c for t, c in running if deadline is not None and t > deadline),
                     unused=sorted(c for _, c in in_time[wanted:]), seconds=float(seconds))


def select_clients(seed: int, round_idx: int, available: list[int], count: int) -> list[int]:
    """`count` of the available clients, uniformly from (seed, round): the same draw as the default sampling
    when every client is available."""
    return [available[i] for i in sample_clients(seed, round_idx, len(available), count)]


class Participation:
    """The simulated clock and each round's plan (a Server's, when the participation block is set)."""

    def __init__(self, cfg, data):
        self.cfg, self.seed = cfg.participation, cfg.seed
        self.per_round = cfg.clients_per_round
        self.systems = client_systems(cfg, data)
        self.availability = Availability(cfg, data.num_clients)
        self.clock = 0.0
        self.upload_bytes: float | None = None  # a client's upload, as measured in the last round with updates

    def plan(self, round_idx: int, payload_bytes: int) -> RoundPlan:
        available = self.availability.available(round_idx, self.clock)
        wanted = min(self.per_round, len(available))
        count = min(len(available), math.ceil((1.0 + self.cfg.over_selection) * wanted))
        selected = select_clients(self.seed, round_idx, available, count)
        upload = payload_bytes if self.upload_bytes is None else self.upload_bytes
        finish = dict(zip(selected, self.systems.seconds(selected, payload_bytes + upload).tolist()))
        drops = uniforms(self.seed, DROPOUT_STREAM, round_idx, np.asarray(selected, dtype=np.int64))
        dropped = {c for c, u in zip(selected, drops.tolist()) if u < self.cfg.dropout}
        return plan_round(selected, finish, dropped, wanted, self.cfg.deadline, self.cfg.idle_seconds, len(available))

    def close(self, plan: RoundPlan, metrics: dict[str, Any], payload_bytes: int) -> dict[str, Any]:
        """The round's participation metrics; the clock moves on by the round's duration."""
        self.clock += plan.seconds
        if metrics.get("clients") and plan.kept:
            self.upload_bytes = metrics["bytes_up"] / len(plan.kept)
        return {"clients_available": plan.available, "clients_selected": len(plan.selected),
                "clients_dropped": len(plan.dropped), "clients_late": len(plan.late),
                "clients_unused": len(plan.unused),
                "bytes_down_discarded": payload_bytes * (len(plan.selected) - len(plan.kept)),
                "simulated_round_seconds": plan.seconds, "simulated_seconds": self.clock}

    def snapshot(self) -> dict[str, Any]:
        return {"clock": self.clock, "upload_bytes": self.upload_bytes}

    def restore(self, snap: dict[str, Any]) -> None:
        self.clock, self.upload_bytes = snap["clock"], snap["upload_bytes"]


def time_to_accuracy(history: list[dict[str, Any]], target: float, key: str = "accuracy") -> float | None:
    """Simulated seconds at the end of the first round whose `key` reached `target`; None if none did."""
    for m in history:
        value = m.get(key)
        if value is not None and value == value and value >= target and "simulated_seconds" in m:
            return float(m["simulated_seconds"])
    return None
