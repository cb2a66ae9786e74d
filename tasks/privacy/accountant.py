"""ε for a δ after a number of rounds, from autodp's RDP accountant (docs/privacy.md, "Accounting").

Model updates (client-level, trusted aggregator): Mooring samples a fixed number m of the N clients per round,
uniformly without replacement (orchestrator/server/sampling.py, sample_clients), so the neighbouring relation is
replace-one (one client's data swapped for another's) and the amplification is autodp's subsampling without
replacement (Wang, Balle & Kasiviswanathan 2019). Under replace-one the sum of clipped updates moves by up to 2C,
so the Gaussian mechanism handed to autodp has noise multiplier z/2. With m = N there is no sampling to amplify:
plain Gaussian composition.

Class statistics (sample-level, local to each client, against anyone who sees them, the server included): one
release per round, add/remove of one sample moves one sum row by ≤ C and one count by 1, so with noise σ·C on
the sums and σ on the counts the joint mechanism is a Gaussian of multiplier σ/√2. No sampling amplification
(the server knows who was sampled) and the worst case of a client sampled every round: rounds compositions.
"""
from __future__ import annotations

import math
import warnings

from autodp.mechanism_zoo import GaussianMechanism
from autodp.transformer_zoo import AmplificationBySampling, Composition


def _gaussian(noise_multiplier: float, neighboring: str) -> GaussianMechanism:
    mechanism = GaussianMechanism(sigma=noise_multiplier)
    mechanism.neighboring = neighboring
    return mechanism


def _approx_dp(mechanism, rounds: int, delta: float) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # autodp's numerical warnings from its optimiser over RDP orders
        return float(Composition()([mechanism], [rounds]).get_approxDP(delta))


def model_epsilon(noise_multiplier: float, num_clients: int, clients_per_round: int, rounds: int,
                  delta: float) -> float:
    """ε after `rounds` rounds of DP-FedAvg with noise multiplier z (noise std z·C on the sum of updates clipped
    to C), m = clients_per_round of N = num_clients sampled without replacement; inf without noise."""
    if noise_multiplier <= 0:
        return math.inf
    base = _gaussian(noise_multiplier / 2, "replace_one")
    if clients_per_round >= num_clients:
        return _approx_dp(base, rounds, delta)
    sampled = AmplificationBySampling(PoissonSampling=False)(base, clients_per_round / num_clients)
    return _approx_dp(sampled, rounds, delta)


def stats_epsilon(noise_multiplier: float, rounds: int, delta: float) -> float:
    """ε (per sample, against the server) after `rounds` releases of a client's noised class statistics."""
    if noise_multiplier <= 0:
        return math.inf
    return _approx_dp(_gaussian(noise_multiplier / math.sqrt(2), "add_remove"), rounds, delta)
