"""The cross-method diagnostics (tasks/algorithms/diagnostics.py) against hand computations, the last5_sync
aggregation, and the claims budgets."""
from __future__ import annotations

import math

import pytest
import torch

from orchestrator.experiment.config import ConfigError, load_config
from orchestrator.experiment.methods import build_algorithm
from pipelines.claims import apply_budget
from pipelines.comparison import aggregate_metric
from tasks.algorithms.base import ClientUpdate, state_of
from tasks.algorithms.diagnostics import (
    classifier_movement,
    model_update_norm,
    probe_inputs,
    round_diagnostics,
)


def fedavg():
    cfg = load_config("configs/default.yaml", ["model.hidden=[]", "model.feature_dim=2", "model.final_relu=false"])
    return build_algorithm(cfg, 2, (2,))


def test_feature_distance_and_classifier_cosine_by_hand():
    algo = fedavg()
    start = state_of(algo.new_model())
    start["body.1.weight"] = torch.eye(2)
    start["body.1.bias"] = torch.zeros(2)
    scaled = {**start, "body.1.weight": 3 * torch.eye(2)}  # client 2's features are 3x client 1's
    a = {**start, "classifier.weight": start["classifier.weight"] + torch.tensor([[1.0, 0.0], [0.0, 1.0]])}
    b = {**scaled, "classifier.weight": start["classifier.weight"] + torch.tensor([[1.0, 1.0], [0.0, -1.0]])}
    b["classifier.bias"] = a["classifier.bias"] = start["classifier.bias"]
    updates = [ClientUpdate(0, 1, tensors=a), ClientUpdate(1, 1, tensors=b)]
    probe = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    out = round_diagnostics(algo, {"model": start}, {"model": start}, updates, probe)
    # ‖h_a − h_b‖ = 2‖x‖: 2 and 4 → 3; mean ‖h‖ over both clients = (1 + 2 + 3 + 6) / 4 = 3
    assert out["feature_distance"] == pytest.approx(3.0)
    assert out["feature_distance_rel"] == pytest.approx(1.0)
    # row 0: cos((1,0,0),(1,1,0)) = 1/√2; row 1: cos((0,1,0),(0,−1,0)) = −1
    assert out["classifier_update_cosine"] == pytest.approx((1 / math.sqrt(2) - 1) / 2)
    assert out["classifier_movement"] == 0 and out["model_update_norm"] == 0


def test_classifier_movement_and_update_norm_by_hand():
    before = {"model": {"classifier.weight": torch.tensor([[1.0, 0.0], [0.0, 2.0]]), "step": torch.tensor(1)}}
    after = {"model": {"classifier.weight": torch.tensor([[0.0, 5.0], [0.0, 1.0]]), "step": torch.tensor(2)}}
    assert classifier_movement(before, after) == pytest.approx(math.sqrt(2) / 2)  # row 0 turns 90°, row 1 stays
    assert model_update_norm(before, after) == pytest.approx(math.sqrt(1 + 25 + 1))  # integer buffers ignored
    assert classifier_movement({}, after) is None


def test_probe_takes_per_class_images_of_every_test_set():
    y = torch.tensor([0, 0, 0, 1, 1])
    x = torch.arange(5.0)[:, None]
    probe = probe_inputs({"rot0": (x, y), "rot30": (x + 10, y)}, per_class=2)
    assert probe.squeeze(1).tolist() == [0, 1, 3, 4, 10, 11, 13, 14]
    assert probe_inputs({}, 2) is None


def test_methods_without_a_shared_model_log_no_feature_distance():
    algo = fedavg()
    start = state_of(algo.new_model())
    updates = [ClientUpdate(0, 1, tensors={"other": torch.zeros(1)}), ClientUpdate(1, 1, tensors=start)]
    out = round_diagnostics(algo, {"model": start}, {"model": start}, updates, torch.zeros(3, 2))
    assert "feature_distance" not in out and "classifier_update_cosine" not in out


def test_last5_sync_averages_only_rounds_where_the_global_model_changed():
    history = [{"accuracy": a, "model_update_norm": n} for a, n in
               [(0.1, 1), (0.9, 0), (0.2, 1), (0.9, 0), (0.3, 1), (0.4, 1), (0.5, 1), (0.6, 1), (0.9, 0)]]
    assert aggregate_metric(history, "accuracy:last5_sync") == pytest.approx(0.4)
    assert aggregate_metric(history, "accuracy:last5") == pytest.approx((0.4 + 0.5 + 0.6 + 0.9 + 0.3) / 5)


def test_full_budget_overrides_every_run_and_set_wins():
    path = "configs/claims/fednh_digits.yaml"
    full = apply_budget(load_config(path), "full", path)
    assert (full.train.rounds, full.train.local_epochs) == (100, 5)
    assert list(full.claims.settings) == ["beta0.1", "beta0.3", "beta1.0"] and full.name == "fednh_digits.full"
    mine = apply_budget(load_config(path, ["train.rounds=3"]), "full", path, ["train.rounds=3"])
    assert mine.train.rounds == 3
    assert apply_budget(load_config(path), "short", path).train.rounds == 30
    with pytest.raises(ConfigError, match=r"--budget 'long': not a budget of this protocol; allowed: short, full"):
        apply_budget(load_config(path), "long", path)
