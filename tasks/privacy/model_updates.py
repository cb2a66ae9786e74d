"""DP-FedAvg in a round (docs/privacy.md): each client clips its update against the model it was sent (and adds
its local noise), the server takes the uniform mean of the clipped models, adds N(0, (z·C)²)/m, and moves the
clipping norm where it adapts. Every draw from (run seed, round[, client], stream), like the rest of a run.

The server's mean is uniform (each client weighs 1), not sample-weighted: a client's weight must not depend on
its data for the sum's sensitivity to be C. The number of clients whose updates arrived is public under the
replace-one relation (a fixed number is sampled), so the mean divides by it.
"""
from __future__ import annotations

import torch

from tasks.privacy.mechanisms import clipped_update, next_clip, with_gaussian_noise
from tasks.privacy.settings import ModelDP
from tasks.seeds import seeded_generator
from tasks.types import ClientUpdate, State, weighted_average

CLIP_KEY = "privacy_clip"  # the round's clipping norm, sent down with the payload where it adapts
WITHIN_CLIP = "privacy_within_clip"  # a client's bit b_k (1: its update's norm was within C), for adaptive clipping
LOCAL_NOISE_STREAM = 0xD91
SERVER_NOISE_STREAM = 0xD92


def round_clip(dp: ModelDP, payload: State) -> float:
    return float(payload[CLIP_KEY]) if CLIP_KEY in payload else float(dp.clip)


def private_client_update(update: ClientUpdate, payload: State, dp: ModelDP, seed: int, round_idx: int) -> ClientUpdate:
    """The update as it leaves the client: its model clipped against the payload model, plus local noise."""
    if not update.tensors:
        return update
    clip = round_clip(dp, payload)
    tensors, norm = clipped_update(update.tensors, payload["model"], clip)
    if dp.local_noise_multiplier > 0:
        tensors = with_gaussian_noise(tensors, dp.local_noise_multiplier * clip,
                                      seeded_generator(seed, round_idx, update.client_id, LOCAL_NOISE_STREAM))
    metrics = {**update.metrics, WITHIN_CLIP: float(norm <= clip)}
    return ClientUpdate(update.client_id, update.num_samples, tensors, update.stats, metrics)


class ServerModelPrivacy:
    """The server's half: the current clipping norm, the noised mean, the adaptive step."""

    def __init__(self, dp: ModelDP, seed: int):
        self.dp, self.seed = dp, seed
        self.clip = float(dp.clip)

    def payload(self, payload: State) -> State:
        """With adaptive clipping the round's norm goes down with the payload (4 bytes); a fixed one is known."""
        if self.dp.adaptive is None:
            return payload
        return {**payload, CLIP_KEY: torch.tensor(self.clip, dtype=torch.float32)}

    def noised(self, mean: State, count: int, round_idx: int) -> State:
        """The mean of `count` clipped models plus N(0, (z·C)²)/count per entry: (Σ_k θ̃_k + N(0, (z·C)²)) / m."""
        std = self.dp.update_noise_multiplier * self.clip / count
        return with_gaussian_noise(mean, std, seeded_generator(self.seed, round_idx, SERVER_NOISE_STREAM))

    def private_state(self, state: State, updates: list[ClientUpdate], round_idx: int, summed: bool) -> State:
        """The aggregated state with the model tensors the clients sent replaced by their noised uniform mean; with
        partial sums, the state's model is that mean already (the actors summed the clipped models unweighted).
        Then the clipping norm takes its adaptive step."""
        sent = updates if summed else [u for u in updates if u.tensors]
        if sent:
            mean = state["model"] if summed else weighted_average([u.tensors for u in sent], [1.0] * len(sent))
            state = {**state, "model": {**state["model"], **self.noised(mean, len(sent), round_idx)}}
        if self.dp.adaptive is not None:
            within = [u.metrics[WITHIN_CLIP] for u in updates if WITHIN_CLIP in u.metrics]
            self.clip = next_clip(self.clip, within, self.dp.adaptive,
                                  seeded_generator(self.seed, round_idx, SERVER_NOISE_STREAM, 1))
        return state
