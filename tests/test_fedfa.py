"""FedFA (docs/methods/fedfa.md) against hand computations: the anchor loss, the calibration step, the anchor moving
average, the server's averaging, the initial anchors, the diagnostics, and a short federated run."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.server.federation import run_in_process
from tasks.algorithms.anchors import (
    classifier_update_cosine,
    feature_anchor_distance,
    min_anchor_distance,
    onehot_anchors,
    random_unit_anchors,
)
from tasks.algorithms.base import ClientData, ClientUpdate, RoundContext, Setup, TrainSettings, state_of
from tasks.algorithms.fedfa import (
    AnchorMovingAverage,
    FedFA,
    FedFAParams,
    anchor_loss,
    batches_per_epoch,
    classifier_calibration,
)

H = torch.tensor([[1.0, 2.0], [3.0, 0.0], [2.0, 3.0]])
Y = torch.tensor([0, 0, 1])
ANCHORS = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # C = 3, d = 2


def tiny_fedfa(**params) -> FedFA:
    setup = Setup(num_classes=3, input_shape=(2,), num_clients=2, model_name="mlp",
                  model_options={"hidden": [4], "feature_dim": 2}, train=TrainSettings(batch_size=2), seed=0)
    return FedFA(FedFAParams(**params), setup)


def context(round_idx: int = 0, **train) -> RoundContext:
    return RoundContext(round_idx, 0, TrainSettings(**train), torch.Generator().manual_seed(round_idx))


# ------------------------------------------------------------------------------------ anchor loss
def test_anchor_loss_is_class_balanced_code_form():
    # class 0: ‖[0,2]‖² = 4 and ‖[2,0]‖² = 4 → mean 4; class 1: ‖[2,2]‖² = 8; (4 + 8)/C = 12/3, no ½
    assert torch.isclose(anchor_loss(H, Y, ANCHORS), torch.tensor(4.0))
    # the paper's per-sample form ½·mean would be 0.5·(4 + 4 + 8)/3 = 8/3: a different number
    assert not torch.isclose(anchor_loss(H, Y, ANCHORS), torch.tensor(8 / 3))


def test_anchor_loss_gradient_reaches_features_only():
    h = H.clone().requires_grad_(True)
    anchors = ANCHORS.clone().requires_grad_(True)
    anchor_loss(h, Y, anchors.detach()).backward()
    # ∂/∂h_j = 2(h_j − a_{y_j}) / (|B_{y_j}|·C)
    expected = torch.tensor([[0.0, 2.0], [2.0, 0.0], [2.0, 2.0]]) * 2 / torch.tensor([[6.0], [6.0], [3.0]])
    assert torch.allclose(h.grad, expected)
    assert anchors.grad is None


def test_anchor_term_trains_extractor_not_classifier():
    model = tiny_fedfa().new_model()
    loss = anchor_loss(model.features(torch.randn(4, 2, generator=torch.Generator().manual_seed(0))),
                       torch.tensor([0, 1, 1, 2]), ANCHORS)
    loss.backward()
    assert model.classifier.weight.grad is None and model.classifier.bias.grad is None
    assert all(p.grad is not None for p in model.extractor_parameters())


# ------------------------------------------------------------------------------------- calibration
def test_calibration_is_one_adam_step_on_the_classifier_only():
    model = tiny_fedfa().new_model()
    before = state_of(model)
    W, b = before["classifier.weight"], before["classifier.bias"]
    # hand gradient of mean CE(A·Wᵀ + b, [0, 1, 2]): (softmax − onehot)ᵀ·A / C and its column sums / C
    p = torch.softmax(ANCHORS @ W.T + b, dim=1) - torch.eye(3)
    grad_w, grad_b = p.T @ ANCHORS / 3, p.sum(0) / 3
    classifier_calibration(model, ANCHORS, lr=1e-3)(model, None, None)
    after = state_of(model)
    # Adam's first step moves each entry by −lr·g/(|g| + eps) ≈ −lr·sign(g)
    assert torch.allclose(after["classifier.weight"], W - 1e-3 * grad_w / (grad_w.abs() + 1e-8), atol=1e-7)
    assert torch.allclose(after["classifier.bias"], b - 1e-3 * grad_b / (grad_b.abs() + 1e-8), atol=1e-7)
    for key in before:
        if not key.startswith("classifier."):
            assert torch.equal(before[key], after[key]), key


def test_calibration_lowers_the_anchor_cross_entropy():
    model = tiny_fedfa().new_model()
    labels = torch.arange(3)
    with torch.no_grad():
        start = float(F.cross_entropy(model.classifier(ANCHORS), labels))
    calibrate = classifier_calibration(model, ANCHORS, lr=1e-2)
    for _ in range(50):
        calibrate(model, None, None)
    with torch.no_grad():
        assert float(F.cross_entropy(model.classifier(ANCHORS), labels)) < start - 0.1


# ------------------------------------------------------------------------------ moving average
def test_anchor_moving_average_matches_code_recursion():
    held = torch.tensor([True, True, False])
    est = AnchorMovingAverage(ANCHORS, held, lam=0.5, batches_per_epoch=2)
    est.add(torch.tensor([[1.0, 1.0], [3.0, 3.0], [9.0, 9.0]]), torch.tensor([0, 0, 2]))  # class-0 mean [2, 2]
    assert torch.equal(est.anchors, ANCHORS)  # nothing moves inside an epoch
    est.add(torch.tensor([[4.0, 0.0], [0.0, 2.0]]), torch.tensor([0, 1]))
    # epoch end: M/B = [[6, 2], [0, 2], [9, 9]]/2; â = ½·a + ½·M/B for held classes; class 2 not held → a_2
    first = torch.tensor([[0.5 * 1 + 0.5 * 3, 0.5 * 0 + 0.5 * 1], [0.0, 0.5 * 1 + 0.5 * 1], [1.0, 1.0]])
    assert torch.allclose(est.anchors, first)
    est.add(torch.tensor([[2.0, 2.0]]), torch.tensor([1]))
    est.end_epoch()  # a partial epoch (local_steps) divides by its own batch count, 1
    second = first.clone()
    second[1] = 0.5 * first[1] + 0.5 * torch.tensor([2.0, 2.0])
    second[0] = 0.5 * first[0]  # class 0 absent from the epoch: its M is 0
    assert torch.allclose(est.anchors, second)


@pytest.mark.parametrize("lam", [0.0, 1.0])
def test_moving_average_extremes(lam):
    est = AnchorMovingAverage(ANCHORS, torch.tensor([True, True, True]), lam=lam, batches_per_epoch=1)
    est.add(H, Y)
    # λ = 1: the anchors never move; λ = 0: the last epoch's mean (class 2 absent: 0)
    expected = ANCHORS if lam == 1 else torch.tensor([[2.0, 1.0], [2.0, 3.0], [0.0, 0.0]])
    assert torch.allclose(est.anchors, expected)


def test_batches_per_epoch_follows_local_batches():
    assert batches_per_epoch(10, TrainSettings(batch_size=4)) == 3
    assert batches_per_epoch(10, TrainSettings(batch_size=4, drop_last=True)) == 2
    assert batches_per_epoch(3, TrainSettings(batch_size=4, drop_last=True)) == 1
    assert batches_per_epoch(10, TrainSettings(batch_size=4, local_steps=7)) == 7


# ------------------------------------------------------------------------------------ client, server
def client_data(labels: list[int]) -> ClientData:
    g = torch.Generator().manual_seed(1)
    y = torch.tensor(labels)
    x = torch.randn(len(y), 2, generator=g)
    return ClientData(0, x, y, torch.zeros(0, 2), torch.zeros(0, dtype=torch.long), 3)


def test_client_returns_the_global_anchor_for_classes_it_lacks():
    algo = tiny_fedfa()
    state = algo.init_global()
    data = client_data([0, 1, 0, 1, 1])
    update, _ = algo.client_update(algo.payload(state, 0), data, {}, context(local_epochs=2))
    sent = update.stats["anchors"]
    assert torch.equal(sent[2], state["anchors"][2])
    assert not torch.equal(sent[:2], state["anchors"][:2])
    assert set(update.metrics) >= {"feature_anchor_distance", "feature_norm", "train_loss"}


def test_update_anchors_off_uploads_no_anchors():
    algo = tiny_fedfa(update_anchors=False, calibrate=False)
    state = algo.init_global()
    update, _ = algo.client_update(algo.payload(state, 0), client_data([0, 1, 2, 1]), {}, context())
    assert update.stats == {}
    assert torch.equal(algo.aggregate(state, [update], 0)["anchors"], state["anchors"])


def test_server_averages_models_and_anchors_by_sample_count():
    algo = tiny_fedfa()
    state = algo.init_global()
    models = [{k: torch.full_like(v, float(i)) for k, v in state["model"].items()} for i in (1, 5)]
    anchors = [torch.zeros(3, 2), torch.full((3, 2), 4.0)]
    ups = [ClientUpdate(i, n, models[i], {"anchors": anchors[i]}) for i, n in enumerate((1, 3))]
    new = algo.aggregate(state, ups, 0)
    # (1·1 + 3·5)/4 = 4 and (1·0 + 3·4)/4 = 3
    assert all(torch.allclose(v, torch.full_like(v, 4.0)) for v in new["model"].values())
    assert torch.allclose(new["anchors"], torch.full((3, 2), 3.0))
    assert "classifier_update_cosine" in new["diagnostics"]


def test_initial_anchors():
    g = lambda s: torch.Generator().manual_seed(s)  # noqa: E731
    a = onehot_anchors(10, 64, g(0))
    assert torch.equal(a @ a.T, torch.eye(10))  # distinct unit axes: pairwise orthogonal
    assert torch.equal(a.sum(0).clamp(max=1), a.sum(0)) and torch.equal(a.abs(), a)  # one-hot, no sign flips
    assert torch.equal(a, onehot_anchors(10, 64, g(0))) and not torch.equal(a, onehot_anchors(10, 64, g(1)))
    r = random_unit_anchors(10, 64, g(0))
    assert torch.allclose(r.norm(dim=1), torch.ones(10)) and (r < 0).any()
    assert torch.allclose(onehot_anchors(5, 3, g(0)).norm(dim=1), torch.ones(5))  # C > d: unit Gaussian rows
    assert torch.equal(tiny_fedfa().init_global()["anchors"], tiny_fedfa().init_global()["anchors"])
    assert torch.allclose(tiny_fedfa().init_global()["anchors"].norm(dim=1), torch.ones(3))  # d = 2 < C = 3


# ---------------------------------------------------------------------------------- diagnostics
def test_classifier_update_cosine_by_hand():
    start = {"classifier.weight": torch.zeros(2, 2), "classifier.bias": torch.zeros(2)}
    a = {"classifier.weight": torch.tensor([[1.0, 0.0], [0.0, 1.0]]), "classifier.bias": torch.tensor([0.0, 0.0])}
    b = {"classifier.weight": torch.tensor([[1.0, 1.0], [0.0, -1.0]]), "classifier.bias": torch.tensor([0.0, 0.0])}
    # row 0: cos([1,0,0], [1,1,0]) = 1/√2; row 1: cos([0,1,0], [0,−1,0]) = −1
    assert math.isclose(classifier_update_cosine([a, b], start), (1 / math.sqrt(2) - 1) / 2, rel_tol=1e-9)
    assert classifier_update_cosine([a], start) is None


def test_min_anchor_distance_and_feature_distance():
    assert math.isclose(min_anchor_distance(ANCHORS), 1.0)  # ‖[1,0] − [1,1]‖ = ‖[0,1] − [1,1]‖ = 1
    model = tiny_fedfa().new_model()
    x = torch.randn(3, 2, generator=torch.Generator().manual_seed(0))
    h = model.features(x).detach()
    dist, norm = feature_anchor_distance(model, x, Y, ANCHORS)
    assert math.isclose(dist, float((h - ANCHORS[Y]).norm(dim=1).mean()), rel_tol=1e-6)
    assert math.isclose(norm, float(h.norm(dim=1).mean()), rel_tol=1e-6)


# ------------------------------------------------------------------------------- a federated run
def test_fedfa_learns_on_digits(tmp_path):
    cfg = load_config("configs/default.yaml", ["algorithm.name=fedfa", "train.rounds=5", "train.optimizer.lr=0.1",
                                               f"data.partitions_dir={tmp_path}"])
    history = run_in_process(cfg, prepare_data(cfg))
    acc = [m["accuracy"] for m in history]
    assert acc[-1] > 0.2 and acc[-1] > acc[0]
    last = history[-1]
    assert {"classifier_update_cosine", "anchor_min_distance", "feature_anchor_distance",
            "feature_anchor_distance_rel"} <= set(last)
    assert all(math.isfinite(last[k]) for k in ("feature_anchor_distance_rel", "anchor_min_distance"))


def test_fedfa_ablations_run(tmp_path):
    cfg = load_config("configs/default.yaml", [
        "algorithm.name=fedfa", "train.rounds=2", f"data.partitions_dir={tmp_path}", "train.local_epochs=1",
        "algorithm.fedfa.calibrate=false", "algorithm.fedfa.update_anchors=false",
        "algorithm.fedfa.anchor_init=random"])
    full = load_config("configs/default.yaml", ["algorithm.name=fedfa", "train.rounds=2", "train.local_epochs=1",
                                                f"data.partitions_dir={tmp_path}"])
    data = prepare_data(cfg)
    fixed, updating = run_in_process(cfg, data), run_in_process(full, data)
    # fixed anchors: the minimum anchor distance stays at its initial value, and no anchors go up
    assert fixed[0]["anchor_min_distance"] == fixed[1]["anchor_min_distance"]
    assert updating[0]["bytes_up"] - fixed[0]["bytes_up"] == 10 * 10 * 64 * 4  # K clients × C×d float32
