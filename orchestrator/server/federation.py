"""The round logic, without Ray: the server loop that drives the clients, and the whole run in one process.

`Server` is what the coordinator actor runs; a client host (orchestrator/clients/client_host.py) is what a client actor
runs. Both are plain objects, so the same round runs in one process (`run_in_process`: the tests' harness and the
benchmarks' bare-loop floor) and on Ray (orchestrator/ray_runtime/actors.py), with the same numbers: every random draw comes
from (run seed, round, client id), and updates are folded in client-id order. The server asks its clients through
a `CallClients`: a typed call in (orchestrator/clients/client_calls.py), each client's result, the partial sums and the
failures out.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import numpy as np

from orchestrator.clients.client_calls import BeginCall, CallClients, CallKind, ClientCall, ClientResults
from orchestrator.clients.client_host import ClientHost
from orchestrator.clients.client_store import ClientStateStore
from orchestrator.clients.global_evaluation import accuracies_on_test_sets
from orchestrator.clients.partial_sums import fold_partial_sums, sums_updates
from orchestrator.experiment.method_settings import nonfinite_loss_advice
from orchestrator.experiment.methods import build_algorithm, server_optimizer_of, server_optimizer_step
from orchestrator.io.history_codec import HistoryText, decoded
from orchestrator.phases import Phases
from orchestrator.server.buffered import BufferedAggregation, run_version
from orchestrator.server.calibration import calibrated_state
from orchestrator.server.evaluation import (
    named_for_split,
    per_client_summary,
    personalized_eval_clients,
    personalized_summary,
)
from orchestrator.server.participation import Participation
from orchestrator.server.robust_round import RobustRound
from orchestrator.server.sampling import sample_clients
from tasks.algorithms import ClientUpdate
from tasks.algorithms.base import State, nbytes
from tasks.algorithms.diagnostics import probe_inputs, round_diagnostics
from tasks.algorithms.faults import method_hook
from tasks.data.federated import FederatedData
from tasks.privacy.server import ServerPrivacy


# ------------------------------------------------------------------------------------------- server
class NonFiniteLoss(ValueError):
    """A client's training loss was NaN or infinite (train.on_nonfinite_loss = stop)."""


def check_finite_losses(results: dict[int, ClientUpdate], round_idx: int,
                        advice: str = "lower train.optimizer.lr (or set train.grad_clip)") -> None:
    """Before aggregation, so the global state stays the last finite one; `advice`: the likely cure
    (orchestrator/experiment/method_settings.py: nonfinite_loss_advice)."""
    for cid in sorted(results):
        loss = results[cid].metrics.get("train_loss")
        if loss is not None and not math.isfinite(float(loss)):
            raise NonFiniteLoss(f"round {round_idx + 1}: client {cid} reported training loss {float(loss)}; "
                                f"{advice}, or set train.on_nonfinite_loss=continue to go on regardless")


@dataclass
class StartedRound:
    """A round whose clients' training was started while the round before it ended (`Server.run_round`'s
    `begin`): its payload and clients, and its clients' results once they are in."""

    round: int
    payload: Any
    sampled: list[int]
    results: Callable[[], ClientResults]


def in_process_calls(host: ClientHost) -> CallClients:
    """The host's answers in this process."""
    return host.call


class Server:
    """The global state and the round loop: sample, broadcast, collect, aggregate, evaluate."""

    def __init__(self, cfg, data: FederatedData):
        self.cfg = cfg
        self.algorithm = build_algorithm(cfg, data.num_classes, data.input_shape)
        self.test_sets = {k: xy for k, xy in data.test_sets().items() if len(xy[1])}  # none with test_fraction 0
        self.probe = probe_inputs(self.test_sets, cfg.eval.probe_per_class) if cfg.eval.diagnostics else None
        self.num_clients = data.num_clients
        self.eval_clients = personalized_eval_clients(cfg.seed, data.num_clients, cfg.eval.personalized_clients)
        # eval.per_client: whose own test data the global model is judged on (None: not judged client by client)
        self.per_client_clients = (personalized_eval_clients(cfg.seed, data.num_clients, cfg.eval.per_client.sample)
                                   if cfg.eval.per_client.enabled and self.algorithm.capabilities().global_model
                                   else None)
        self.round = 0
        self.state = self.algorithm.init_global()
        self.history: list[dict[str, Any]] = []
        self.history_text = HistoryText()  # the history as checkpoints hold it, each round encoded once
        self.bytes_total = 0
        self.set_up = not self.algorithm.capabilities().setup_exchange
        self.phases = Phases()  # where the rounds' time goes (`mooring run --profile`); never in the history
        self.summed = sums_updates(self.algorithm, cfg)
        self.server_optimizer = server_optimizer_of(cfg)  # algorithm.server_optimizer, or None
        # availability, speeds, deadlines, dropouts on a simulated clock (orchestrator/server/participation.py)
        sync = cfg.participation.active and cfg.participation.mode == "sync"
        self.participation = Participation(cfg, data) if sync else None
        # FedBuff-style asynchronous aggregation instead of rounds (orchestrator/server/buffered.py)
        self.buffered = BufferedAggregation(cfg, data) if cfg.participation.mode == "buffered" else None
        self.privacy = ServerPrivacy(cfg.privacy_settings, self.algorithm.name, cfg.seed, data.num_clients,
                                     cfg.clients_per_round)
        # threat: and algorithm.aggregator (orchestrator/server/robust_round.py); None without either
        self.robust = RobustRound(cfg, data.num_clients) if cfg.threat is not None or cfg.reads_each_update else None
        # (state) -> {test set: accuracy} or None: here on the CPU, unless the runtime evaluates where the
        # clients' compute is (orchestrator/ray_runtime/actors.py: a client actor's GPU)
        self.global_accuracies: Callable[[State], dict[str, float] | None] = lambda state: accuracies_on_test_sets(
            self.algorithm, state, self.test_sets, self.cfg.eval.batch_size)
        self.started: StartedRound | None = None  # the next round, its clients already training
        if self.algorithm.capabilities().global_model:  # the evaluation's model, built now rather than in round 1
            self.algorithm.working_model(key="eval")

    # ------------------------------------------------------------------ checkpointable state
    def snapshot(self) -> dict[str, Any]:
        snap = {"round": self.round, "state": self.state, "history": self.history_text.of(self.history),
                "bytes_total": self.bytes_total, "set_up": self.set_up, "privacy": self.privacy.snapshot()}
        clock = self.participation or self.buffered
        if self.robust is not None:
            snap["robust"] = self.robust.snapshot()
        return snap | ({"participation": clock.snapshot()} if clock else {})

    def restore(self, snap: dict[str, Any]) -> None:
        self.round, self.state, self.history = snap["round"], snap["state"], decoded(snap["history"])
        self.history_text = HistoryText()
        self.bytes_total, self.set_up = snap["bytes_total"], snap["set_up"]
        clock = self.participation or self.buffered
        if clock:
            clock.restore(snap["participation"])
        self.privacy.restore(snap.get("privacy", {}))
        if self.robust is not None:
            self.robust.restore(snap.get("robust", {}))

    # ------------------------------------------------------------------ one round
    def setup(self, contributions: list) -> None:
        with method_hook(self.algorithm, -1):
            self.state = self.algorithm.server_setup(self.state, contributions)
        self.set_up = True

    def run_round(self, call: CallClients, begin: BeginCall | None = None) -> dict[str, Any]:
        """One round (or buffered version); a method's exception in it leaves as a MethodError naming its hook
        (tasks/algorithms/faults.py), its clients' raised where they ran. With `begin` (the next round will be
        run, and its clients train elsewhere), the next round's training is started before this round's
        evaluation, so that the two overlap, where the round allows it (`can_start_ahead`)."""
        with method_hook(self.algorithm, self.round):
            if self.buffered is not None:
                return run_version(self, call)
            return self._run_round(call, begin)

    def can_start_ahead(self) -> bool:
        """Whether the next round's training may start before this round has ended: its payload and clients are
        then what they would be at its own start, and nothing ending this round touches them (no client state,
        which a round started and never ended would have changed; no exchange, clock or noise of the round's
        own; an evaluation that asks nothing of the clients)."""
        capabilities = self.algorithm.capabilities()
        return not (capabilities.keeps_client_state or capabilities.pre_round_exchange or capabilities.personalized
                    or self.per_client_clients is not None or self.participation is not None or self.buffered is not None
                    or self.privacy.models is not None or self.privacy.stats is not None
                    or self.cfg.algorithm.calibration is not None)

    def _sampled_payload(self, t: int):
        """Round t's payload, participation plan (or None) and sampled clients."""
        payload = self.privacy.payload(self.algorithm.payload(self.state, t))
        plan = self.participation.plan(t, nbytes(payload)) if self.participation else None
        # with a participation plan, the clients available, in time, not dropped out
        sampled = plan.kept if plan is not None else sample_clients(self.cfg.seed, t, self.num_clients,
                                                                     self.cfg.clients_per_round)
        return payload, plan, sampled

    def _start_next_round(self, begin: BeginCall) -> None:
        t = self.round
        with self.phases("round: sample, payload"):
            payload, _, sampled = self._sampled_payload(t)
        results = begin(ClientCall(CallKind.UPDATE, payload, sampled, t, summed=self.summed))
        self.started = StartedRound(t, payload, sampled, results)

    def settle_started(self) -> None:
        """Wait for a round begun ahead that no call asked for (the run stopped before it), and drop it: its
        clients' hosts are then free for the run's last calls. Its results, or its failure, are no part of the run."""
        started, self.started = self.started, None
        if started is not None:
            with suppress(Exception):
                started.results()

    def _run_round(self, call: CallClients, begin: BeginCall | None) -> dict[str, Any]:
        t, phase = self.round, self.phases
        started, self.started = self.started, None  # round t, begun as round t - 1 ended
        if started is None:
            with phase("round: sample, payload"):
                payload, plan, sampled = self._sampled_payload(t)
        else:
            payload, plan, sampled = started.payload, None, started.sampled
        cids, failed, pre_bytes = sampled, [], 0
        if self.algorithm.capabilities().pre_round_exchange:
            with phase("round: pre-round exchange"):
                answered = call(ClientCall(CallKind.PRE_ROUND, payload, sampled, t))
                contributions, failed = answered.results, answered.failed
                cids = sorted(contributions)  # a client that failed here sits this round out
                pre_bytes = nbytes([contributions[c] for c in cids])
                self.state = self.algorithm.server_pre_round(self.state, [contributions[c] for c in cids], t)
                payload = self.privacy.payload(self.algorithm.payload(self.state, t))
        with phase("round: clients' updates"):
            trained = (started.results() if started is not None
                       else call(ClientCall(CallKind.UPDATE, payload, cids, t, summed=self.summed)))
            results, partials, failed_training = trained.results, trained.partial_sums, trained.failed
        with phase("round: aggregate"):
            if self.cfg.train.on_nonfinite_loss == "stop":
                check_finite_losses(results, t, nonfinite_loss_advice(self.cfg))
            updates = [results[c] for c in sorted(results)]
            before = self.state
            threat_metrics = {}
            if self.robust is not None:  # the attack on the updates, then the robust aggregate in the mean's place
                updates, threat_metrics = self.robust.apply(updates, before["model"],
                                                            self.algorithm.aggregation_weights(updates), t)
            if self.summed and updates:
                self.state = {**self.state, "model": fold_partial_sums(partials, self.state["model"])}
            elif not self.summed:
                self.state = self.algorithm.aggregate(self.state, updates, t)
            if self.server_optimizer is not None and updates:
                self.state = server_optimizer_step(self.algorithm, self.server_optimizer, before, self.state)
            self.state = self.privacy.private_state(self.state, updates, t, self.summed)
        self.round = t + 1
        if begin is not None and self.can_start_ahead():
            self._start_next_round(begin)
        with phase("round: metrics"):
            payload_bytes = nbytes(payload)
            metrics = self._round_metrics(t, payload_bytes, sampled, updates, sorted(failed + failed_training),
                                          pre_bytes + sum(p.bytes_sent for p in partials))
            metrics.update(threat_metrics)
            if self.cfg.eval.diagnostics:
                metrics.update(round_diagnostics(self.algorithm, before, self.state, updates, self.probe))
            metrics.update(self.privacy.metrics(self.round))
            if plan is not None:
                metrics.update(self.participation.close(plan, metrics, payload_bytes))
        if self.eval_due():
            with phase("round: evaluate"):
                metrics.update(self.evaluate(call))
        self.history.append(metrics)
        return metrics

    def eval_due(self) -> bool:
        """Whether the round that has just ended (`round` counts it) evaluates (eval.every, and the last)."""
        return self.round % self.cfg.eval.every == 0 or self.round == self.cfg.train.rounds

    def _round_metrics(self, t, payload_bytes: int, cids, updates: list[ClientUpdate], failed: list[int],
                       pre_round_bytes: int = 0) -> dict[str, Any]:
        bytes_down = payload_bytes * len(cids)
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
        state = self.state
        if self.cfg.algorithm.calibration is not None and call is not None:  # CCVR: the calibrated model is judged
            state, calibration_metrics = calibrated_state(self, call)
            out.update(calibration_metrics)
        accs = self.global_accuracies(state)
        if accs:  # None without a global model, {} without a global test set
            out["accuracy"] = float(np.mean(list(accs.values())))
            if len(accs) > 1:
                out["accuracy_worst"] = min(accs.values())
                out.update({f"accuracy_{k}": v for k, v in accs.items()})
        if self.per_client_clients is not None and call is not None:  # the same model, on each client's own test data
            judged = call(ClientCall(CallKind.EVALUATE_GLOBAL, state, self.per_client_clients, self.round)).results
            if judged:
                out.update(per_client_summary(judged))
        if self.robust is not None:
            out.update(self.robust.attack_success_rate(self.algorithm, state, self.test_sets,
                                                       self.cfg.eval.batch_size))
        if self.algorithm.capabilities().personalized and call is not None:
            payload = self.algorithm.payload(self.state, self.round)
            per_client = call(ClientCall(CallKind.EVALUATE, payload, self.eval_clients, self.round)).results
            out.update(personalized_summary(per_client))
        return named_for_split(out, self.cfg.eval.split)


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
