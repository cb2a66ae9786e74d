"""algorithm.calibration (CCVR, tasks/algorithms/ccvr.py) at an evaluation: every client's class statistics under
the global model, the classifier calibrated on virtual features, and the calibrated model evaluated in place of
the global one (the uncalibrated accuracy is logged beside it). Training goes on from the uncalibrated state."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from orchestrator.clients.client_calls import CallClients, CallKind, ClientCall
from tasks.algorithms.base import State, nbytes, seeded_generator, state_of
from tasks.algorithms.ccvr import calibrate
from tasks.algorithms.server_side import ServerAlgorithm

CALIBRATION_STREAM = 0xCC7  # the virtual features' and the calibration batches' draws: (seed, round, stream)


class CalibratedServer(Protocol):
    """What calibration reads of the server (orchestrator/server/federation.py: `Server`)."""

    cfg: Any
    algorithm: ServerAlgorithm
    state: State
    round: int
    num_clients: int
    global_accuracies: Callable[[State], dict[str, float] | None]


def calibrated_state(server: CalibratedServer, call: CallClients) -> tuple[State, dict[str, float]]:
    """(the server state with its global model calibrated, {accuracy_uncalibrated, bytes_calibration})."""
    model = server.algorithm.global_model(server.state)
    request = ClientCall(CallKind.CALIBRATE, {"model": state_of(model)}, list(range(server.num_clients)), server.round)
    answered = call(request).results
    stats = [answered[c] for c in sorted(answered)]
    generator = seeded_generator(server.cfg.seed, server.round, CALIBRATION_STREAM)
    calibrated = calibrate(model, stats, server.cfg.algorithm.calibration, generator)
    metrics = {"bytes_calibration": float(nbytes(stats))}
    raw = server.global_accuracies(server.state)
    if raw:
        metrics["accuracy_uncalibrated"] = float(np.mean(list(raw.values())))
    return {**server.state, "model": calibrated}, metrics
