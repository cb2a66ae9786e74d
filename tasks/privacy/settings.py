"""A run's privacy settings as plain frozen values (built from the config's `privacy` block, orchestrator/experiment/config.py)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

# the metrics that carry the ε reached: models (client-level), class statistics (sample-level); here, in a module
# without torch, so that a run's summary (orchestrator/reporting/results.py) imports no torch before Ray starts
EPSILON_KEYS = ("dp_epsilon", "dp_epsilon_stats")
# a noise multiplier other than 0 lies in this range (docs/privacy.md, "The range of noise"): below it ε exceeds 10⁸
# and from about 1e-162 the accountant's σ² is 0 (ε lost, or a ZeroDivisionError); above it the accountant takes
# more than half a second a round, its ε reads 0 from about 1e7, and σ² overflows from about 1.3e154
NOISE_RANGE = (1e-3, 1e4)


@dataclass(frozen=True)
class AdaptiveClipping:
    """Andrew et al. 2021: the clipping norm follows the `target_quantile` of the clients' update norms,
    C ← C·exp(−learning_rate·(b̃ − target_quantile)), b̃ the noised fraction of updates within C."""

    target_quantile: float = 0.5
    learning_rate: float = 0.2
    count_noise_multiplier: float = 0.0  # σ_b: std of the Gaussian noise on the count of updates within C


@dataclass(frozen=True)
class ModelDP:
    """Client-level DP for model updates: each update Δ_k = θ_k − θ clipped to ℓ2 norm `clip`; noise of std
    noise_multiplier·clip on the sum at the server, local_noise_multiplier·clip on each update at its client."""

    clip: float | None = None
    noise_multiplier: float = 0.0
    local_noise_multiplier: float = 0.0
    adaptive: AdaptiveClipping | None = None

    @property
    def active(self) -> bool:
        return self.clip is not None

    @property
    def update_noise_multiplier(self) -> float:
        """The noise on the sum of updates: with adaptive clipping, the share of noise_multiplier left once the
        count's noise is paid for, (z⁻² − (2σ_b)⁻²)^(−1/2) (Andrew et al. 2021, Theorem 1); else noise_multiplier."""
        z = self.noise_multiplier
        if self.adaptive is None or z == 0:
            return z
        return (z ** -2 - (2 * self.adaptive.count_noise_multiplier) ** -2) ** -0.5

    def central_noise_multiplier(self, clients_per_round: int) -> float:
        """The noise the sum of a round's updates carries, in units of the clip: the server's and the m clients'
        local noise together, sqrt(z² + m·z_local²)."""
        return math.sqrt(self.noise_multiplier ** 2 + clients_per_round * self.local_noise_multiplier ** 2)


@dataclass(frozen=True)
class StatsDP:
    """Sample-level DP for per-class feature statistics: every feature clipped to ℓ2 norm `clip` before it is
    summed, then Gaussian noise of std noise_multiplier·clip on each sum entry and noise_multiplier on each count,
    on the client, before the statistics leave it."""

    clip: float | None = None
    noise_multiplier: float = 0.0

    @property
    def active(self) -> bool:
        return self.clip is not None


@dataclass(frozen=True)
class Privacy:
    delta: float = 1e-5
    models: ModelDP = field(default_factory=ModelDP)
    stats: StatsDP = field(default_factory=StatsDP)

    @property
    def active(self) -> bool:
        return self.models.active or self.stats.active
