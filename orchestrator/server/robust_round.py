"""Attacks and robust aggregation in the server's round (tasks/robust holds the tensor code, docs/robustness.md).

Applied to what any method's clients send, between collecting a round's updates and the method's `aggregate`:
  1. model poisoning: each malicious client's update Δ_k = θ_k − θ (θ the global model it was sent) replaced by the
     attack's, over the model tensors it sends (other things it sends go as they are);
  2. robust aggregation: the aggregate ρ of the round's updates (bucketed first where asked), and every update's
     model tensors replaced by θ + ρ, so that the method's own aggregation (a weighted mean, a server learning rate,
     FedDyn's correction, a server optimiser after it) takes ρ where it would have taken the mean.
Data poisoning changes the malicious clients' training splits where their shards are built (tasks/robust/attacks.py's
`poisoned_data`, on the client hosts). The client hosts then send each update rather than partial sums (`ExperimentConfig.reads_each_update`)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from orchestrator.experiment.robust_settings import aggregator_of
from tasks.algorithms import ClientUpdate
from tasks.algorithms.server_side import ServerAlgorithm
from tasks.robust import aggregators as agg
from tasks.robust import attacks
from tasks.seeds import seeded_generator

BUCKET_STREAM = 0xB0C7
THREAT_METRIC = "threat_clients"  # the round's updates (or trained shards) that came from malicious clients
ASR_METRIC = "attack_success_rate"


def robustness_note(cfg) -> str:
    """The one line a run prints where reading each update turns partial sums off ("" otherwise)."""
    from orchestrator.clients.partial_sums import sums_updates_asked

    if not cfg.reads_each_update or not sums_updates_asked(cfg):
        return ""
    what = [f"algorithm.aggregator={aggregator_of(cfg).name}"] if aggregator_of(cfg) else []
    what += [f"threat.attack={cfg.threat.attack}"] if cfg.threat is not None and not cfg.threat.poisons_data else []
    return (f"{' and '.join(what)} read each client's update, so the clients send their updates rather than "
            "partial sums (resources.partial_sums is off for this run)")


def model_keys(reference: dict[str, torch.Tensor], sent: list[ClientUpdate]) -> list[str]:
    """The global model's float tensors that every update sends, in the same shape."""
    return [k for k, v in reference.items() if torch.is_floating_point(v)
            and all(k in u.tensors and u.tensors[k].shape == v.shape for u in sent)]


def flat_deltas(sent: list[ClientUpdate], reference: dict[str, torch.Tensor], keys: list[str]) -> torch.Tensor:
    """[n, d] float64: each update's Δ_k = θ_k − θ over `keys`, flattened."""
    base = torch.cat([reference[k].to(torch.float64).flatten() for k in keys])
    return torch.stack([torch.cat([u.tensors[k].to(torch.float64).flatten() for k in keys]) - base for u in sent])


def unflat(delta: torch.Tensor, reference: dict[str, torch.Tensor], keys: list[str]) -> dict[str, torch.Tensor]:
    """θ + Δ over `keys`, each tensor in its own shape and dtype."""
    out, start = {}, 0
    for k in keys:
        ref = reference[k]
        out[k] = (ref.to(torch.float64) + delta[start:start + ref.numel()].reshape(ref.shape)).to(ref.dtype)
        start += ref.numel()
    return out


class RobustRound:
    """The server's half of a threat and of a robust aggregator, with the state they carry between rounds
    (centered clipping's last aggregate, the mimic attackers' direction), which checkpoints hold."""

    def __init__(self, cfg, num_clients: int):
        self.seed, self.threat, self.aggregator = cfg.seed, cfg.threat, aggregator_of(cfg)
        threat = self.threat
        self.fixed = (attacks.fixed_malicious(cfg.seed, num_clients, threat.fraction)
                      if threat is not None and threat.selection == "fixed" else None)
        self.mimic = attacks.Mimic(threat.warmup, cfg.seed) if threat is not None and threat.attack == "mimic" else None
        self.center: torch.Tensor | None = None

    def malicious(self, round_idx: int, cids: list[int]) -> frozenset[int]:
        if self.threat is None:
            return frozenset()
        if self.fixed is not None:
            return self.fixed & set(cids)
        return attacks.round_malicious(self.seed, round_idx, cids, self.threat.fraction)

    def apply(self, updates: list[ClientUpdate], reference: dict[str, torch.Tensor], weights: list[float],
              round_idx: int) -> tuple[list[ClientUpdate], dict[str, float]]:
        """The round's updates as the method's aggregate is to see them (attacked, then robustly aggregated), and
        the round's metrics of the threat."""
        metrics: dict[str, float] = {}
        if self.threat is not None:
            metrics[THREAT_METRIC] = len(self.malicious(round_idx, [u.client_id for u in updates]))
        poisons_models = self.threat is not None and not self.threat.poisons_data
        index = [i for i, u in enumerate(updates) if u.tensors]
        sent = [updates[i] for i in index]
        keys = model_keys(reference, sent) if sent else []
        if not keys or not (poisons_models or self.aggregator is not None):
            return updates, metrics
        deltas = flat_deltas(sent, reference, keys)
        updates = list(updates)
        if poisons_models:
            cids = [u.client_id for u in sent]
            bad = self.malicious(round_idx, cids)
            deltas = self._attacked(deltas, cids, round_idx)
            for row, i in enumerate(index):
                if updates[i].client_id in bad:
                    updates[i] = replace(updates[i], tensors={**updates[i].tensors,
                                                              **unflat(deltas[row], reference, keys)})
        if self.aggregator is not None:
            w = torch.tensor([weights[i] for i in index], dtype=torch.float64)
            robust = unflat(self._aggregate(deltas, w, round_idx), reference, keys)
            for i in index:
                updates[i] = replace(updates[i], tensors={**updates[i].tensors, **robust})
        return updates, metrics

    def _attacked(self, deltas: torch.Tensor, cids: list[int], round_idx: int) -> torch.Tensor:
        threat, bad = self.threat, self.malicious(round_idx, cids)
        rows = [i for i, c in enumerate(cids) if c in bad]
        if not rows:
            return deltas
        honest_rows = [i for i, c in enumerate(cids) if c not in bad]
        # with no honest update in the round, the attackers read their own true ones (Baruch et al.'s setting)
        honest_ids = [cids[i] for i in honest_rows] or [cids[i] for i in rows]
        honest = deltas[honest_rows] if honest_rows else deltas[rows]
        out = deltas.clone()
        shared = None
        if threat.attack == "alie":
            shared = attacks.alie(honest, len(cids), len(rows), threat.z)
        elif threat.attack == "ipm":
            shared = attacks.ipm(honest, threat.epsilon)
        elif threat.attack == "mimic":
            shared = self.mimic(honest, honest_ids)
        for i in rows:
            if shared is not None:
                out[i] = shared
            elif threat.attack == "sign_flip":
                out[i] = attacks.sign_flip(deltas[i], threat.scale)
            else:  # gaussian
                out[i] = attacks.gaussian(deltas[i], threat.std, seeded_generator(
                    self.seed, round_idx, cids[i], attacks.NOISE_STREAM))
        return out

    def _aggregate(self, deltas: torch.Tensor, weights: torch.Tensor, round_idx: int) -> torch.Tensor:
        a = self.aggregator
        if a.name not in agg.WEIGHTED:
            weights = torch.ones_like(weights)
        if a.bucketing > 1:
            deltas, weights = agg.buckets(deltas, weights, a.bucketing,
                                          seeded_generator(self.seed, round_idx, BUCKET_STREAM))
        center = self.center if self.center is not None and self.center.shape == deltas[0].shape else None
        out = agg.aggregate(a.name, deltas, weights, beta=a.beta, f=a.f, m=a.m, iterations=a.iterations, nu=a.nu,
                            tau=a.tau, center=center, max_norm=a.max_norm)
        if a.name == "centered_clipping":
            self.center = out
        return out

    # ------------------------------------------------------------------ evaluation
    def attack_success_rate(self, algorithm: ServerAlgorithm, state, test_sets, batch_size: int) -> dict[str, float]:
        """A backdoor's success: of the global test images not of the target class, shown with the trigger, the
        share the global model classifies as the target ({} for other attacks or without a global model)."""
        threat = self.threat
        if threat is None or threat.attack != "backdoor" or not test_sets:
            return {}
        model = algorithm.global_model(state)
        if model is None:
            return {}
        from tasks.algorithms.base import evaluating

        hits = trials = 0
        with evaluating(model), torch.no_grad():
            for x, y in test_sets.values():
                value = float(x.max()) if threat.trigger_value is None else threat.trigger_value
                keep = y != threat.target
                xt = attacks.with_trigger(x[keep], threat.trigger_size, value)
                device = next(model.parameters()).device
                preds = torch.cat([model(xt[s:s + batch_size].to(device)).argmax(1).cpu()
                                   for s in range(0, len(xt), batch_size)]) if len(xt) else torch.zeros(0)
                h, n = attacks.attack_success(preds, y[keep], threat.target)
                hits, trials = hits + h, trials + n
        return {ASR_METRIC: hits / trials} if trials else {}

    # ------------------------------------------------------------------ checkpoints
    def snapshot(self) -> dict[str, Any]:
        snap: dict[str, Any] = {}
        if self.center is not None:
            snap["center"] = self.center
        if self.mimic is not None:
            snap["mimic"] = dict(self.mimic.state)
        return snap

    def restore(self, snap: dict[str, Any]) -> None:
        self.center = snap.get("center")
        if self.mimic is not None and "mimic" in snap:
            self.mimic.state = dict(snap["mimic"])
