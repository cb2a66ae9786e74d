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

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.server.sampling import client_costs, sample_clients
from tasks.algorithms.base import derive_seeds
from tasks.json_data import JsonProblem, parse_json

AVAILABILITY_STREAM = 0xA7A
PHASE_STREAM = 0x9A5
SPEED_STREAM = 0x5BD
BANDWIDTH_STREAM = 0xBA4
DROPOUT_STREAM = 0xD20


class TraceError(ValueError):
    """A trace file that cannot be read or does not have the expected shape; the message is one line."""


# ------------------------------------------------------------------------------------------- traces
def read_availability_trace(path: str) -> dict[int, list[tuple[float, float]]]:
    """{client: [(start, end), ...]} from a JSON object {"client id": [[start, end], ...]} (simulated seconds)."""
    try:
        raw = parse_json(Path(path).read_bytes(), unique_keys=True)
    except OSError as e:
        raise TraceError(f"cannot read the trace ({e.strerror or e})") from None
    except JsonProblem as e:
        raise TraceError(str(e)) from None
    if not isinstance(raw, dict):
        raise TraceError('expected a JSON object {"client id": [[start, end], ...]}')
    if not raw:
        raise TraceError('lists no client, so no client would ever be available; expected {"client id": '
                         '[[start, end], ...]}')
    out: dict[int, list[tuple[float, float]]] = {}
    keys: dict[int, str] = {}
    for key, intervals in raw.items():
        cid = _client_id(key)
        if cid in out:  # "3" and "03" are one client
            raise TraceError(f"client {cid} is listed twice (as {keys[cid][:40]!r} and {key[:40]!r}); list each "
                             "client once")
        keys[cid] = key
        if not isinstance(intervals, list) or not all(_is_interval(i) for i in intervals):
            raise TraceError(f"client {key}: expected a list of [start, end] pairs of finite numbers with start < end")
        out[cid] = sorted((float(a), float(b)) for a, b in intervals)
    return out


def _client_id(text: Any) -> int:
    try:
        cid = int(text)
    except (TypeError, ValueError):
        raise TraceError(f"{str(text)[:40]!r} is not a client id (0, 1, 2, ...)") from None
    if cid < 0:
        raise TraceError(f"{text!r} is not a client id (0, 1, 2, ...)")
    return cid


def _is_interval(item: Any) -> bool:
    return (isinstance(item, list) and len(item) == 2 and all(_is_finite_number(v) for v in item)
            and item[0] < item[1])


def _is_finite_number(value: Any) -> bool:
    """A JSON number a float holds: an integer past 1.8e308 has no float, and is no simulated time."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return abs(value) < 1e308 if isinstance(value, int) else math.isfinite(value)


def read_system_trace(path: str) -> dict[int, tuple[float, float]]:
    """{client: (speed in steps/s, bandwidth in bytes/s)} from a CSV file with columns client,speed,bandwidth."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(f"cannot read the trace ({getattr(e, 'strerror', None) or e})") from None
    except csv.Error as e:  # a field over csv's limit (128 KiB), a NUL byte
        raise TraceError(f"not CSV ({e})") from None
    out: dict[int, tuple[float, float]] = {}
    lines: dict[int, int] = {}
    for line, row in enumerate(rows, start=2):
        if set(row) != {"client", "speed", "bandwidth"}:
            raise TraceError("expected the columns client,speed,bandwidth")
        try:
            speed, bandwidth = float(row["speed"]), float(row["bandwidth"])
        except (TypeError, ValueError):
            raise TraceError(f"line {line}: speed and bandwidth must be numbers") from None
        if not (speed > 0 and bandwidth > 0 and math.isfinite(speed) and math.isfinite(bandwidth)):
            raise TraceError(f"line {line}: speed and bandwidth must be positive and finite")
        cid = _client_id(row["client"])
        if cid in out:
            raise TraceError(f"line {line}: client {cid} has a row already (line {lines[cid]}); one row per client")
        out[cid], lines[cid] = (speed, bandwidth), line
    return out


def clients_outside(trace: dict[int, Any], num_clients: int) -> str | None:
    """Why a trace's clients are not the federation's (None: every client id it names is one)."""
    stranger = next((c for c in sorted(trace) if c >= num_clients), None)
    if stranger is None:
        return None
    return f"client {stranger} is not in the federation (data.num_clients = {num_clients}: clients 0 .. {num_clients - 1})"


# --------------------------------------------------------------------------------------------- draws
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
