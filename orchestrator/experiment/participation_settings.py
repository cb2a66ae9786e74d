"""The participation block's settings checked where the config is (docs/participation.md): the trace files read and
their shape, the clients they name, and the methods buffered aggregation can run; the simulated clock itself is
orchestrator/server/participation.py and orchestrator/server/buffered.py."""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tasks.json_data import JsonProblem, parse_json

if TYPE_CHECKING:
    from tasks.algorithms.base import Algorithm


class TraceError(ValueError):
    """A trace file that cannot be read or does not have the expected shape; the message is one line."""


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


def buffered_refusal(kind: type[Algorithm]) -> str:
    """Why a method cannot run buffered, or "": it must average models as FedAvg does, keep no client state and
    exchange nothing before training (docs/participation.md says which others could, and how)."""
    can = kind.capabilities()
    if not can.averages_models or not can.broadcasts_model or not can.global_model:
        return f"{kind.name} does not aggregate by averaging models as FedAvg does"
    if can.keeps_client_state:
        return f"{kind.name} keeps client state"
    if can.pre_round_exchange or can.setup_exchange:
        return f"{kind.name} exchanges with its clients outside their updates"
    return ""
