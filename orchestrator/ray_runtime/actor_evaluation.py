"""The global model's evaluation on the client actors rather than in the coordinator: on the first client actor
that computes on a GPU (resources.evaluate_on = auto), or split over every actor, each counting the correct
predictions of its share of the test sets (split_evaluation.py), its counts sent ahead of a round begun as the one
before it ends. Where an actor is gone, the coordinator evaluates on its own CPU."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import ray
from ray.exceptions import ObjectLostError, RayActorError

from orchestrator.ray_runtime.actor_lifecycle import ClientActors
from orchestrator.ray_runtime.split_evaluation import (
    evaluates_over_client_actors,
    evaluation_fractions,
    evaluation_shares,
)

if TYPE_CHECKING:
    from orchestrator.server.federation import Server


class SentCounts(NamedTuple):
    """An evaluation's counts sent to the actors ahead of the round begun after it: the state they count for,
    and the actors' answers to come."""

    state: Any
    refs: list


class ActorEvaluation:
    """Where the server's global evaluation runs on the client actors: `install` puts it in place of the server's
    own (`Server.global_accuracies`) where the run evaluates on an actor's GPU or over the actors."""

    def __init__(self, cfg, actors: ClientActors, server: Server, costs: list[float] | None):
        self.cfg, self.actors, self.server, self.costs = cfg, actors, server, costs
        self.evaluator: int | None = None  # the client actor that evaluates on its GPU, if any
        # the global model's evaluation split over the actors (split_evaluation.py); a method without one has none
        self.splits_evaluation = False
        self.sent_counts: SentCounts | None = None  # an evaluation's counts, sent ahead of a round begun

    def install(self) -> None:
        server = self.server
        self.evaluator = self._gpu_actor() if self.cfg.resources.evaluate_on == "auto" else None
        if self.evaluator is not None:
            server.global_accuracies = self._global_accuracies_on_actor
        elif server.algorithm.capabilities().global_model and evaluates_over_client_actors(
                self.cfg, server.algorithm, len(self.actors.handles)):
            self.splits_evaluation = True
            server.global_accuracies = self._global_accuracies_over_actors

    def _gpu_actor(self) -> int | None:
        """The first client actor that computes on a GPU: the global model is evaluated there."""
        return next((idx for idx, info in enumerate(self.actors.info()) if info.get("device") == "cuda"), None)

    def _global_accuracies_on_actor(self, state) -> dict[str, float] | None:
        """Global evaluation on the GPU of a client actor; on this CPU if that actor is gone for good."""
        from orchestrator.clients.global_evaluation import accuracies_on_test_sets

        state_ref = ray.put(state)
        for _ in range(2):
            try:
                answer = ray.get(self.actors.handles[self.evaluator].evaluate_global.remote(
                    state_ref, self.cfg.eval.batch_size))
            except RayActorError:
                answer = False
            if answer is not False:
                return answer
            if not self.actors.await_ready(self.evaluator):
                break
        server = self.server
        return accuracies_on_test_sets(server.algorithm, state, server.test_sets, self.cfg.eval.batch_size)

    def _global_accuracies_over_actors(self, state) -> dict[str, float] | None:
        """Global evaluation split over the client actors, each counting the correct predictions of its share of
        every test set (split_evaluation.py); the counts add up exactly, so the accuracies are the ones of one
        process. Its counts were sent ahead of the next round's training where that round was begun
        (`count_ahead`); on this CPU if an actor is gone."""
        from orchestrator.clients.global_evaluation import accuracies_on_test_sets

        server = self.server
        sent, self.sent_counts = self.sent_counts, None
        counts = sent.refs if sent is not None and sent.state is state else self._send_counts(state, {})
        with server.phases("evaluate: on the client actors"):
            try:
                answers = ray.get(counts)
            except (RayActorError, ObjectLostError):
                answers = [False]
        if any(answer is False for answer in answers):
            return accuracies_on_test_sets(server.algorithm, state, server.test_sets, self.cfg.eval.batch_size)
        return {name: sum(answer[name] for answer in answers) / max(1, n) for name, n in self._test_sizes().items()}

    def _test_sizes(self) -> dict[str, int]:
        return {name: len(y) for name, (_, y) in self.server.test_sets.items()}

    def _send_counts(self, state, plan: dict[int, list[int]]) -> list:
        """Each actor asked to count the correct predictions of its share of the test sets, the shares weighed
        against the training `plan` sends it next ({actor: clients}), so that the actors finish together."""
        sizes = self._test_sizes()
        handles = self.actors.handles
        queued = [sum(self.costs[c] for c in plan.get(a, [])) if self.costs else 0.0 for a in range(len(handles))]
        shares = evaluation_shares(sizes, evaluation_fractions(queued, sum(sizes.values())))
        state_ref = ray.put(state)
        return [actor.count_correct.remote(state_ref, share, self.cfg.eval.batch_size)
                for actor, share in zip(handles, shares) if any(end > start for start, end in share.values())]

    def count_ahead(self, plan: dict[int, list[int]]) -> None:
        """For a round begun ahead as the round before it ends with an evaluation due: that evaluation's counts
        sent before the round's training, so that the ending round's metrics need not wait for it."""
        server = self.server
        if self.splits_evaluation and server.eval_due():
            with server.phases("evaluate: sent ahead of the next round's training"):
                self.sent_counts = SentCounts(server.state, self._send_counts(server.state, plan))
