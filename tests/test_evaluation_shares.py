"""The global evaluation split over client actors (resources.evaluate_on): who takes which share of the test sets,
and when `auto` splits it."""
from __future__ import annotations

import pytest

from orchestrator.experiment.config import load_config
from orchestrator.ray_runtime.split_evaluation import (
    SHARE_QUANTUM,
    evaluates_over_client_actors,
    evaluation_fractions,
    evaluation_shares,
)


def test_the_least_loaded_actors_take_the_evaluation_up_to_a_common_level():
    assert evaluation_fractions([0.0, 0.0], 270) == [0.5, 0.5]
    # 100 queued against 0: the level is (100 + 270) / 2 = 185, so 85 and 185 of the 270 samples
    assert evaluation_fractions([100.0, 0.0], 270) == pytest.approx([85 / 270, 185 / 270])
    # an actor queued past the level takes none: (0 + 270) / 1 = 270 < 1000
    assert evaluation_fractions([1000.0, 0.0], 270) == [0.0, 1.0]
    # three actors, 300 queued on one: the other two fill to (100 + 0 + 270) / 2 = 185 < 300
    assert evaluation_fractions([100.0, 300.0, 0.0], 270) == pytest.approx([85 / 270, 0.0, 185 / 270])
    assert evaluation_fractions([5.0, 7.0], 0) == [0.5, 0.5]


def test_shares_cut_every_test_set_into_contiguous_pieces_that_cover_it_at_multiples_of_the_quantum():
    assert SHARE_QUANTUM == 32
    shares = evaluation_shares({"test": 270, "rotated": 5, "large": 1000}, [85 / 270, 185 / 270])
    # 85 -> 96 (3 × 32), 5 × 0.31 -> 0, 1000 × 0.31 = 314.8 -> 320 (10 × 32)
    assert shares == [{"test": (0, 96), "rotated": (0, 0), "large": (0, 320)},
                      {"test": (96, 270), "rotated": (0, 5), "large": (320, 1000)}]
    thirds = evaluation_shares({"test": 100}, [1 / 3, 1 / 3, 1 / 3])
    assert thirds == [{"test": (0, 32)}, {"test": (32, 64)}, {"test": (64, 100)}]
    assert evaluation_shares({"test": 3}, [0.0, 1.0]) == [{"test": (0, 0)}, {"test": (0, 3)}]


@pytest.mark.ray
@pytest.mark.parametrize("model, cpus_per_actor, evaluate_on, split", [
    ("acar_cnn", 1, "auto", True),  # 2 actors of 1 CPU hold the shared instance's 2: the coordinator has none
    ("acar_cnn", 0.5, "auto", False),  # a CPU is free for the coordinator's evaluation
    ("mlp", 1, "auto", False),  # a small model's evaluation costs less than the calls
    ("mlp", 0.5, "client_actors", True),
    ("acar_cnn", 1, "coordinator", False),
])
def test_auto_splits_a_large_models_evaluation_where_the_actors_hold_every_cpu(ray_session, model, cpus_per_actor,
                                                                              evaluate_on, split):
    from orchestrator.experiment.methods import build_algorithm

    assert ray_session.cluster_resources()["CPU"] == 2
    shape = ["model.hidden=64", "model.feature_dim=32"] if model == "acar_cnn" else []
    cfg = load_config("configs/default.yaml", [f"model.name={model}", *shape, "data.dataset=digits_28",
                                               f"resources.cpus_per_actor={cpus_per_actor}",
                                               f"resources.evaluate_on={evaluate_on}"])
    algorithm = build_algorithm(cfg, 10, (1, 28, 28))
    assert evaluates_over_client_actors(cfg, algorithm, num_actors=2) is split
