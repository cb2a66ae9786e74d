"""The release of a client's per-class feature statistics under `privacy.stats` (docs/privacy.md): the methods
sum clipped features (base.class_feature_stats, prototypes.ClassMeans and the vectorized engine's SeenFeatures
take the clip), then call `released` before the statistics leave the client."""
from __future__ import annotations

import torch

from tasks.privacy.mechanisms import released_class_stats
from tasks.privacy.settings import StatsDP
from tasks.seeds import seeded_generator
from tasks.types import RoundContext

STATS_NOISE_STREAM = 0xD93


def released(sums: torch.Tensor, counts: torch.Tensor, dp: StatsDP, ctx: RoundContext,
             client_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The sums and counts as they leave the client: noised where `dp` is active (from (seed, round, client)),
    unchanged otherwise."""
    if not dp.active:
        return sums, counts
    return released_class_stats(sums, counts, dp, seeded_generator(ctx.seed, ctx.round, client_id, STATS_NOISE_STREAM))
