"""Attacks by a federation's malicious clients, on what they send (model poisoning: their updates Δ = θ_k − θ, rows
of an [n, d] float64 matrix) or on what they train on (data poisoning: their training split).

Model poisoning replaces a malicious client's update; the omniscient attacks (ALIE, IPM, mimic) read the round's
honest updates, as their papers assume. Every random draw comes from (run seed, round, client id, stream)."""
from __future__ import annotations

import math
from dataclasses import replace
from statistics import NormalDist

import torch

from tasks.seeds import seeded_generator

MODEL_ATTACKS = ("sign_flip", "gaussian", "alie", "ipm", "mimic")
DATA_ATTACKS = ("label_flip", "backdoor")
ATTACKS = MODEL_ATTACKS + DATA_ATTACKS
OMNISCIENT = frozenset({"alie", "ipm", "mimic"})
SELECT_STREAM = 0xA77A
NOISE_STREAM = 0xA77B
POISON_STREAM = 0xA77C


# ------------------------------------------------------------------------------------------ who attacks
def malicious_count(fraction: float, n: int) -> int:
    """round(fraction · n), at most n."""
    return min(n, int(math.floor(fraction * n + 0.5)))


def fixed_malicious(seed: int, num_clients: int, fraction: float) -> frozenset[int]:
    """The clients malicious for the whole run: round(fraction · num_clients) of them, drawn from the seed."""
    order = torch.randperm(num_clients, generator=seeded_generator(seed, SELECT_STREAM))
    return frozenset(int(c) for c in order[:malicious_count(fraction, num_clients)])


def round_malicious(seed: int, round_idx: int, sampled: list[int], fraction: float) -> frozenset[int]:
    """The clients malicious in one round: round(fraction · |sampled|) of the round's clients, drawn from
    (seed, round)."""
    cids = sorted(sampled)
    order = torch.randperm(len(cids), generator=seeded_generator(seed, round_idx, SELECT_STREAM))
    return frozenset(cids[int(i)] for i in order[:malicious_count(fraction, len(cids))])


# ------------------------------------------------------------------------------------------ model poisoning
def sign_flip(own: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """−scale · Δ_k: the client's own update, reversed and scaled (bit flipping at scale 1)."""
    return -scale * own


def gaussian(like: torch.Tensor, std: float, generator: torch.Generator) -> torch.Tensor:
    """An update drawn from N(0, std²) per coordinate in place of the client's own (Blades' noise attack)."""
    return torch.randn(like.shape, generator=generator, dtype=torch.float64).to(like.dtype) * std


def alie_z(n: int, f: int) -> float:
    """Baruch et al. 2019: s = ⌊n/2 + 1⌋ − f supporters are needed, z = Φ⁻¹((n − s) / n)."""
    s = math.floor(n / 2 + 1) - f
    p = (n - s) / n
    return NormalDist().inv_cdf(min(max(p, 1e-6), 1 - 1e-6))


def alie(honest: torch.Tensor, n: int, f: int, z: float | None = None) -> torch.Tensor:
    """A little is enough: μ − z·σ, the honest updates' coordinate-wise mean and (unbiased) standard deviation
    (σ = 0 with a single honest update)."""
    z = alie_z(n, f) if z is None else z
    sigma = honest.std(0) if honest.shape[0] > 1 else torch.zeros_like(honest[0])
    return honest.mean(0) - z * sigma


def ipm(honest: torch.Tensor, epsilon: float) -> torch.Tensor:
    """Inner product manipulation (Xie et al. 2020): −ε · the honest updates' mean."""
    return -epsilon * honest.mean(0)


class Mimic:
    """The mimic attack of the bucketing paper's code (its variant with a warm-up): over the first `warmup` rounds
    the attackers estimate the direction z along which the honest updates vary most (one power-iteration step a
    round from a seeded start) and copy, each round, the honest update furthest along z; after the warm-up they
    copy the client chosen last (or, where it was not sampled, the round's furthest again)."""

    def __init__(self, warmup: int, seed: int):
        self.warmup, self.seed = warmup, seed
        self.state: dict = {"t": 0, "target": -1}

    def _direction(self, honest: torch.Tensor) -> None:
        t, avg = self.state["t"], honest.mean(0)
        if t == 0:
            mu = avg
            z = torch.randn(honest.shape[1], generator=seeded_generator(self.seed, NOISE_STREAM, 1),
                            dtype=torch.float64).to(honest.dtype)
        else:
            mu, z = t / (1 + t) * self.state["mu"] + avg / (1 + t), self.state["z"]
        centered = honest - mu
        step = (centered @ z) @ centered
        step = step / step.norm().clamp_min(1e-12)
        z = step if t == 0 else t / (1 + t) * z + step / (1 + t)
        self.state.update(mu=mu, z=z / z.norm().clamp_min(1e-12))

    def __call__(self, honest: torch.Tensor, honest_ids: list[int]) -> torch.Tensor:
        if self.state["t"] < self.warmup:
            self._direction(honest)
        if self.state["t"] < self.warmup or self.state["target"] not in honest_ids:
            scores = honest @ self.state["z"]
            self.state["target"] = honest_ids[int(scores.argmax())]
        self.state["t"] += 1
        return honest[honest_ids.index(self.state["target"])].clone()


# ------------------------------------------------------------------------------------------ data poisoning
def flipped_labels(y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Label flipping as the bucketing paper's code does it: y → C − 1 − y."""
    return num_classes - 1 - y


def with_trigger(x: torch.Tensor, size: int, value: float) -> torch.Tensor:
    """The backdoor trigger: a size × size patch of `value` in the bottom-right corner of each image (the last two
    dimensions); on flat inputs, the last size² features."""
    x = x.clone()
    if x.dim() >= 3:
        x[..., -size:, -size:] = value
    else:
        x[..., -size * size:] = value
    return x


def backdoored(x: torch.Tensor, y: torch.Tensor, target: int, size: int, value: float, fraction: float,
               generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A client's training split with round(fraction · n) of its samples, drawn from `generator`, carrying the
    trigger and relabelled `target` (Bagdasaryan et al. 2020's data poisoning)."""
    n = len(y)
    chosen = torch.randperm(n, generator=generator)[:malicious_count(fraction, n)]
    x, y = x.clone(), y.clone()
    if len(chosen):
        x[chosen] = with_trigger(x[chosen], size, value)
        y[chosen] = target
    return x, y


def attack_success(predictions: torch.Tensor, y: torch.Tensor, target: int) -> tuple[int, int]:
    """(hits, trials): of the test samples whose label is not `target`, shown with the trigger, how many the model
    classifies as `target`."""
    keep = y != target
    return int((predictions[keep] == target).sum()), int(keep.sum())


def poisoned_data(data, threat, num_classes: int, seed: int, malicious: frozenset[int]):
    """A client's shard as the threat leaves it: a malicious client's training split label-flipped or
    backdoored (its own test split as it is), anyone else's unchanged."""
    if threat is None or not threat.poisons_data or data.client_id not in malicious:
        return data
    if threat.attack == "label_flip":
        return replace(data, y=flipped_labels(data.y, num_classes))
    value = float(data.x.max()) if threat.trigger_value is None and len(data.y) else (threat.trigger_value or 0.0)
    x, y = backdoored(data.x, data.y, threat.target, threat.trigger_size, value, threat.poison_fraction,
                    seeded_generator(seed, data.client_id, POISON_STREAM))
    return replace(data, x=x, y=y)
