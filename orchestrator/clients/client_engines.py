"""A round's local training on a client host, by engine (train.engine): one client after another (sequential), or
each group of the call's clients (orchestrator/clients/client_groups.py) trained together per architecture (vectorized,
tasks/algorithms/engines.py). Either returns the updates, or with `summed` (resources.partial_sums) the updates
without models and one partial sum per group (per group and architecture on the vectorized engine). Groups are
fixed by the config and the round, so neither engine's results depend on which other groups a host trains. A
method's exception leaves as a MethodError naming its client(s) and round (tasks/algorithms/faults.py)."""
from __future__ import annotations

import time

from orchestrator.clients.client_calls import ClientResults
from orchestrator.clients.engine_host import ClientTurn, HostedCall
from orchestrator.clients.partial_sums import PartialSum, sum_updates
from tasks.algorithms import ClientUpdate
from tasks.algorithms.base import nbytes
from tasks.algorithms.client_side import ClientAlgorithm
from tasks.algorithms.engines import (
    ClientRound,
    fold_one_step,
    one_step_foldable,
    round_batches,
    train_rounds,
)
from tasks.algorithms.faults import method_hook


def results_of(updates: dict[int, ClientUpdate], summed: bool, uniform: bool,
               groups: list[list[int]]) -> ClientResults:
    """With `summed`, one partial sum per group of `groups` (which cover `updates`); `uniform` (privacy.models):
    the clipped updates weigh 1 each in their partial sum."""
    if not summed:
        return ClientResults(updates)
    results = ClientResults()
    for group in groups:
        stripped, partials = sum_updates({cid: updates[cid] for cid in group}, uniform)
        results.add(ClientResults(stripped, partials))
    results.results = {cid: results.results[cid] for cid in updates}
    return results


class SequentialEngine:
    """Each client's `client_update` in turn, seeded from (run seed, round, client)."""

    def updates(self, call: HostedCall) -> ClientResults:
        algorithm, updates = call.algorithm, {}
        for turn in call.turns(call.client_ids, True):
            with method_hook(algorithm, call.round, [turn.cid]):
                update, state = algorithm.client_update(call.payload, turn.data, turn.state, turn.ctx)
            updates[turn.cid] = update = call.leave(turn, update, state, "client_update")
            update.metrics.setdefault("seconds", time.perf_counter() - turn.started)
        return results_of(updates, call.summed, call.uniform, call.groups)


class VectorizedEngine:
    """The clients' local objectives, grouped by architecture (model key), each group trained as one batch; a
    method that sends its trained model as it is (FedAvg) and keeps no client state has its partial sum taken
    straight from the stacked models."""

    def __init__(self, algorithm: ClientAlgorithm, uniform: bool):
        """`uniform`: privacy.models, whose updates are each clipped apart first."""
        self.single = SequentialEngine()
        capabilities = algorithm.capabilities()
        self.sums_stacked = capabilities.uploads_trained_model and not capabilities.keeps_client_state and not uniform

    def updates(self, call: HostedCall) -> ClientResults:
        """Each group of the call's clients trained apart from the others, in group order."""
        results = ClientResults()
        for group in call.groups:
            results.add(self._group_updates(call.to(group)))
        results.results = {cid: results.results[cid] for cid in call.client_ids}
        return results

    def _group_updates(self, call: HostedCall) -> ClientResults:
        """One group's clients. A group of one client trains on the sequential engine: batching one client buys
        nothing, and vmap's fixed cost is most of a tiny client's round (benchmarks/README.md, "Fixed cost")."""
        if len(call.client_ids) == 1:
            return self.single.updates(call)
        algorithm = call.algorithm
        start = time.perf_counter()
        updates, partials = {}, []
        for key, group in self._prepared_rounds(call).items():
            model = algorithm.working_model(key=key)
            with method_hook(algorithm, call.round, [turn.cid for turn, _ in group]):  # trained together
                if call.summed and self.sums_stacked:
                    partial, summed_updates = self._summed_group(algorithm, model, group)
                    partials.append(partial)
                    updates.update(summed_updates)
                    continue
                batch = train_rounds(algorithm, model, [r for _, r in group])
            for (turn, r), result in zip(group, batch.each()):
                updates[turn.cid] = self._finish(call, turn, r, result)
        seconds = (time.perf_counter() - start) / max(1, len(call.client_ids))  # the clients' share of the batch's time
        for update in updates.values():
            update.metrics.setdefault("seconds", seconds)
        ordered = {cid: updates[cid] for cid in call.client_ids}
        if call.summed and self.sums_stacked:
            return ClientResults(ordered, partials)
        return results_of(ordered, call.summed, call.uniform, [call.client_ids])

    def _prepared_rounds(self, call: HostedCall) -> dict[object, list[tuple[ClientTurn, ClientRound]]]:
        """The clients' rounds as the vectorized engine takes them, grouped by architecture (model key)."""
        rounds: dict[object, list[tuple[ClientTurn, ClientRound]]] = {}
        for turn in call.turns(call.client_ids, False):
            with method_hook(call.algorithm, call.round, [turn.cid]):
                objective = call.algorithm.local_objective(call.payload, turn.data, turn.state, turn.ctx)
            rounds.setdefault(objective.model_key, []).append((turn, ClientRound(turn.data, turn.ctx, objective)))
        return rounds

    def _summed_group(self, algorithm: ClientAlgorithm, model,
                      group: list[tuple[ClientTurn, ClientRound]]) -> tuple[PartialSum, dict[int, ClientUpdate]]:
        """One group's partial sum, and its clients' updates without models, as FedAvg's client_result and
        `sum_updates` would make them. Clients that all take one step are folded without training them apart
        where that is exact (`fold_one_step`); otherwise they train together and are summed from their stacked
        models. (Folding only the one-step clients of a mixed group was measured no faster: the others' steps
        remain, and the fold is one more pass; benchmarks/README.md.)"""
        rounds = [r for _, r in group]
        sizes = [float(r.data.num_samples) for r in rounds]
        phased = bool(rounds[0].objective.phases)  # each phase draws its own batches (train_rounds)
        batches = None if phased else round_batches(rounds, rounds[0].ctx.train)
        if batches is not None and all(len(b) == 1 for b in batches) and one_step_foldable(algorithm, rounds):
            sums, buffers, losses = fold_one_step(algorithm, model, rounds, batches, sizes)
        else:
            batch = train_rounds(algorithm, model, rounds, batches)
            (sums, buffers), losses = batch.weighted_sum(sizes), batch.losses
        model_bytes = nbytes(rounds[0].objective.start) * len(rounds)
        partial = PartialSum(min(turn.cid for turn, _ in group), float(sum(sizes)), sums, buffers, model_bytes)
        updates = {turn.cid: ClientUpdate(turn.cid, r.data.num_samples, metrics={"train_loss": loss})
                   for (turn, r), loss in zip(group, losses)}
        return partial, updates

    def _finish(self, call: HostedCall, turn: ClientTurn, r: ClientRound, result) -> ClientUpdate:
        with method_hook(call.algorithm, call.round, [turn.cid]):
            update, state = call.algorithm.client_result(result.state, result.train_loss, call.payload, r.data,
                                                         turn.state, r.ctx)
        return call.leave(turn, update, state, "client_result")
