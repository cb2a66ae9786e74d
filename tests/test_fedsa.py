"""FedSA and FedProto (docs/methods/fedsa.md): semantic anchors, each loss against a hand computation with the parameters
it reaches, the margin, prototype-only uploads from private heterogeneous models, and short federated runs."""
from __future__ import annotations

import math

import pytest
import torch

from orchestrator.experiment.config import load_config, with_overrides
from orchestrator.experiment.datasets import prepare_data
from orchestrator.server.federation import run_in_process
from tasks.algorithms import ALGORITHMS, ClientData, ClientUpdate, RoundContext, Setup, TrainSettings
from tasks.algorithms.fedproto import FedProtoParams, fedproto_loss
from tasks.algorithms.fedsa import (
    FedSAParams,
    anchor_regularisation,
    batch_class_means,
    classifier_calibration_loss,
    client_margin,
    margin_contrastive_loss,
    semantic_anchors,
)
from tasks.algorithms.prototypes import mean_nearest_neighbour_distance, mean_of_present, nearest_prototype
from tasks.models import build_model


def ce(logits: list[float], target: int) -> float:
    return -logits[target] + math.log(sum(math.exp(v) for v in logits))


# --------------------------------------------------------------------------------------------- anchors
def test_embedded_anchors_are_non_negative_fixed_and_seeded():
    anchors = semantic_anchors(10, 64, seed=5)
    assert anchors.shape == (10, 64) and not anchors.requires_grad
    assert anchors.min() >= 0  # ReLU after BatchNorm over the C rows (docs/methods/fedsa.md §2)
    assert 0.3 < (anchors == 0).float().mean() < 0.7
    assert torch.equal(anchors, semantic_anchors(10, 64, seed=5))
    assert not torch.equal(anchors, semantic_anchors(10, 64, seed=6))
    assert semantic_anchors(10, 64, seed=5, embed=False).min() < 0  # no ER: raw Gaussian centres


# ---------------------------------------------------------------------------------------------- losses
H = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
Y = torch.tensor([0, 1])
ANCHORS = torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0]])


def test_anchor_regularisation_by_hand():
    # per sample (the code): squared differences (0−0)²+(1−0)² and (2−3)²+(0−0)², averaged over 2 samples × 2 dims
    assert anchor_regularisation(H, Y, ANCHORS).item() == pytest.approx((1 + 1) / 4)
    # Eq. (5) on class means: Σ_c ‖P^c − Ā^c‖
    assert anchor_regularisation(H, Y, ANCHORS, per_sample=False).item() == pytest.approx(1 + 1)


def test_margin_contrastive_loss_by_hand():
    m = 0.5
    d0 = [1.0, math.sqrt(10), 3.0]  # ‖(0,1) − Ā^c‖
    d1 = [2.0, 1.0, math.sqrt(20)]  # ‖(2,0) − Ā^c‖
    expected = (ce([-(d0[0] + m), -d0[1], -d0[2]], 0) + ce([-d1[0], -(d1[1] + m), -d1[2]], 1)) / 2
    assert margin_contrastive_loss(H, Y, ANCHORS, m).item() == pytest.approx(expected, rel=1e-5)
    assert margin_contrastive_loss(H, Y, ANCHORS, 2 * m).item() > expected  # a larger margin asks for more


def test_margin_contrastive_loss_is_finite_on_an_anchor():
    h = ANCHORS[:1].clone().requires_grad_(True)
    margin_contrastive_loss(h, torch.tensor([0]), ANCHORS, 1.0).backward()
    assert torch.isfinite(h.grad).all()  # the clamped square root (docs/methods/fedsa.md §10.6)


def test_classifier_calibration_by_hand():
    head = torch.nn.Linear(2, 3)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        head.bias.copy_(torch.tensor([0.0, 0.5, -1.0]))
    anchors = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    expected = (ce([1.0, 0.5, 0.0], 0) + ce([0.0, 2.5, 1.0], 1) + ce([1.0, 1.5, 1.0], 2)) / 3
    assert classifier_calibration_loss(head, anchors).item() == pytest.approx(expected, rel=1e-5)


def test_fedproto_loss_by_hand_and_its_gradient():
    h = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    protos, mask = torch.tensor([[0.0, 0.0], [1.0, 1.0]]), torch.tensor([True, False])
    loss = fedproto_loss(h, torch.tensor([0, 1]), protos, mask)
    assert loss.item() == pytest.approx((1 + 4 + 0 + 0) / 4)  # class 1 has no global prototype: no pull
    loss.backward()
    assert h.grad[0].tolist() == pytest.approx([2 * 1 / 4, 2 * 2 / 4]) and h.grad[1].tolist() == [0.0, 0.0]


def grads_of(loss_fn) -> tuple[bool, bool]:
    """(does the extractor get a gradient, does the head) for a loss of a tiny model's features."""
    torch.manual_seed(0)
    model = build_model("mlp", (1, 2, 2), 3, {"hidden": [4], "feature_dim": 2})
    loss_fn(model, model.features(torch.randn(4, 1, 2, 2))).backward()
    extractor = any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.extractor_parameters())
    head = any(p.grad is not None for p in model.classifier.parameters())
    return extractor, head


def test_each_loss_reaches_the_parameters_of_table_3_5():
    y = torch.tensor([0, 1, 2, 0])
    assert grads_of(lambda m, h: anchor_regularisation(h, y, ANCHORS)) == (True, False)
    assert grads_of(lambda m, h: anchor_regularisation(*batch_class_means(h, y), ANCHORS, per_sample=False)) == (True, False)
    assert grads_of(lambda m, h: margin_contrastive_loss(h, y, ANCHORS, 1.0)) == (True, False)
    assert grads_of(lambda m, h: classifier_calibration_loss(m.classifier, ANCHORS)) == (False, True)


def test_batch_class_means():
    means, classes = batch_class_means(torch.tensor([[1.0, 0.0], [3.0, 2.0], [5.0, 5.0]]), torch.tensor([2, 2, 0]))
    assert classes.tolist() == [0, 2] and means.tolist() == [[5.0, 5.0], [2.0, 1.0]]


# ---------------------------------------------------------------------------------------------- margin
def test_margin_is_the_larger_mean_nearest_neighbour_distance():
    points = torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0]])
    assert mean_nearest_neighbour_distance(points) == pytest.approx((3 + 3 + 4) / 3)
    assert mean_nearest_neighbour_distance(points[:1]) == 0.0
    assert client_margin(points, local_margin=0.0) == pytest.approx(10 / 3)  # never trained: the global margin
    assert client_margin(points, local_margin=5.0) == 5.0


# ---------------------------------------------------------------------------------- server aggregation
def test_unweighted_prototype_mean_and_anchor_ema():
    algo = make("fedsa", alpha=0.5)
    d = algo.feature_dim
    state = algo.init_global()
    ups = [ClientUpdate(0, 1, stats={"protos": torch.ones(1, d), "counts": one_hot_counts([0])}),
           ClientUpdate(1, 500, stats={"protos": torch.stack([3 * torch.ones(d), torch.ones(d)]),
                                       "counts": one_hot_counts([0, 4])})]
    new = algo.aggregate(state, ups, 0)
    assert new["proto_mask"].nonzero().flatten().tolist() == [0, 4]
    assert new["protos"][0].tolist() == pytest.approx([2.0] * d)  # (1 + 3)/2: not weighted by sample count
    assert new["anchors"][0].tolist() == pytest.approx((0.5 * state["anchors"][0] + 1.0).tolist())
    assert torch.equal(new["anchors"][1], state["anchors"][1])  # absent classes: anchors unchanged
    protos, mask = mean_of_present([torch.tensor([[1.0], [0.0]]), torch.tensor([[3.0], [5.0]])],
                                   [torch.tensor([True, False]), torch.tensor([True, True])])
    assert protos.flatten().tolist() == [2.0, 5.0] and mask.tolist() == [True, True]


def test_nearest_prototype_rules():
    protos = torch.tensor([[0.0, 0.0], [10.0, 0.0]])
    h = torch.tensor([[9.0, 0.0], [1.0, 0.0]])
    assert nearest_prototype(h, protos).tolist() == [1, 0]
    assert nearest_prototype(h, protos, torch.tensor([True, False])).tolist() == [0, 0]
    assert nearest_prototype(h, protos, torch.tensor([False, False])).tolist() == [-1, -1]  # nothing to match yet


# --------------------------------------------------------------------------------------------- clients
def one_hot_counts(classes: list[int], num_classes: int = 10) -> torch.Tensor:
    counts = torch.zeros(num_classes)
    counts[classes] = 3.0
    return counts


def make(name: str, **params):
    setup = Setup(num_classes=10, input_shape=(1, 8, 8), num_clients=4, model_name="fedsa_digits_1",
                  model_options={"feature_dim": 16}, train=TrainSettings(batch_size=4, lr=0.01))
    schema = FedSAParams if name == "fedsa" else FedProtoParams
    return ALGORITHMS.get(name)(schema(**params), setup)


def digits_client(cid: int) -> ClientData:
    g = torch.Generator().manual_seed(cid)
    x, y = torch.randn(12, 1, 8, 8, generator=g), torch.tensor([0, 3, 3, 7] * 3)
    return ClientData(cid, x, y, x[:4], y[:4], num_classes=10)


def test_clients_get_heterogeneous_private_models():
    algo = make("fedsa")
    assert [algo.architecture(i) for i in range(5)] == [f"fedsa_digits_{i}" for i in (0, 1, 2, 3, 0)]
    homogeneous = make("fedsa", homogeneous_model=True)
    assert {homogeneous.architecture(i) for i in range(4)} == {"fedsa_digits_1"}
    first, fifth = algo.init_client(digits_client(0)), algo.init_client(digits_client(4))
    assert all(torch.equal(first["model"][k], fifth["model"][k]) for k in first["model"])  # same arch, same start
    assert first["model"].keys() != algo.init_client(digits_client(3))["model"].keys()


@pytest.mark.parametrize("name,params", [("fedsa", {}), ("fedsa", {"per_sample": False}), ("fedproto", {})])
def test_client_sends_only_prototypes_of_its_classes(name, params):
    algo = make(name, **params)
    state = algo.init_global()
    payload = algo.payload(state, 0)
    assert set(payload) <= {"anchors", "protos", "proto_mask"}
    data = digits_client(3)  # the conv member
    client_state = algo.init_client(data)
    ctx = RoundContext(round=0, seed=0, train=algo.setup.train, generator=torch.Generator().manual_seed(1))
    update, new_state = algo.client_update(payload, data, client_state, ctx)
    assert update.tensors == {} and math.isfinite(update.metrics["train_loss"])
    assert set(update.stats) == {"protos", "counts"}
    assert update.stats["protos"].shape == (3, algo.feature_dim)  # classes 0, 3 and 7 only
    assert update.bytes_sent == 4 * (3 * algo.feature_dim + 10)
    assert any(not torch.equal(new_state["model"][k], client_state["model"][k]) for k in client_state["model"])
    if name == "fedsa":
        assert new_state["local_margin"] == pytest.approx(mean_nearest_neighbour_distance(update.stats["protos"]))
    results = algo.client_evaluate(algo.payload(algo.aggregate(state, [update], 0), 1), data, new_state, ctx)
    expected_rules = {"acc", "head", "proto"} | ({"anchor"} if name == "fedsa" else set())
    assert set(results) == expected_rules and results["acc"] == results["proto"]


def test_fedproto_reports_pm_l_and_pm_v_by_the_nearest_global_prototype_by_hand():
    """FedNH's FedProto.py scores PM(L) (`labeldist`) and PM(V) (`validclass`) on the global test set by the nearest
    global prototype. Body Linear(3, 2) = [[1, 0, 0], [0, 1, 0]], no bias, ReLU: h = relu(x₀, x₁)."""
    setup = Setup(num_classes=2, input_shape=(3,), num_clients=2, model_name="mlp",
                  model_options={"hidden": [], "feature_dim": 2}, train=TrainSettings())
    algo = ALGORITHMS.get("fedproto")(FedProtoParams(homogeneous_model=True), setup)
    model = {**algo.initial_model(0), "body.1.weight": torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]),
             "body.1.bias": torch.zeros(2)}
    x = torch.tensor([[1.0, 0.0, 2.0], [0.5, -1.0, 0.0], [0.0, 1.0, 1.0]])  # h = (1, 0), (0.5, 0), (0, 1)
    y = torch.tensor([0, 1, 1])
    payload = {"protos": torch.tensor([[1.0, 0.0], [0.0, 1.0]]), "proto_mask": torch.tensor([True, True])}
    ctx = RoundContext(round=1, seed=0, train=setup.train, generator=torch.Generator().manual_seed(0))
    # predicted 0, 0, 1: right, wrong, right
    for train_y, pm_l, pm_v in ((torch.tensor([0, 0, 1]), (2 / 3 + 1 / 3, 2 / 3 + 1 / 3 + 1 / 3), (2.0, 3.0)),
                                (torch.tensor([1, 1, 1]), (1.0, 2.0), (1.0, 2.0))):
        data = ClientData(0, x, train_y, x[:0], train_y[:0], num_classes=2, global_x_test=x, global_y_test=y)
        results = algo.client_evaluate(payload, data, {"model": model}, ctx)
        assert results["pm_l"] == pytest.approx(pm_l) and results["pm_v"] == pytest.approx(pm_v)
    no_global = ClientData(0, x, y, x, y, num_classes=2)
    assert "pm_l" not in algo.client_evaluate(payload, no_global, {"model": model}, ctx)


def test_fedproto_logs_the_pm_metrics_fednhs_table_reads(tmp_path):
    cfg = load_config("configs/default.yaml", [f"data.partitions_dir={tmp_path}", "algorithm.name=fedproto",
                                               "data.client_test_fraction=0.0", "train.rounds=2", "train.local_epochs=1"])
    last = run_in_process(cfg, prepare_data(cfg))[-1]
    for key in ("personalized_pm_l_client_mean", "personalized_pm_v_client_mean"):  # configs/tables/fednh.yaml
        assert 0.0 < last[key] <= 1.0, key


def test_eval_global_test_off_skips_the_pm_metrics_and_changes_nothing_else(tmp_path):
    """eval.global_test: false (FedSA's table, which reads no PM) evaluates no client on the global test set; the
    own-split metrics and the training are the same."""
    base = [f"data.partitions_dir={tmp_path}", "algorithm.name=fedproto", "train.rounds=2", "train.local_epochs=1"]
    runs = {}
    for flag in ("true", "false"):
        cfg = load_config("configs/default.yaml", [*base, f"eval.global_test={flag}"])
        runs[flag] = run_in_process(cfg, prepare_data(cfg))
    on, off = runs["true"][-1], runs["false"][-1]
    assert "personalized_pm_l_client_mean" in on and not any("pm_" in k for k in off)
    shared = [k for k in off if k.startswith("personalized_") and "seconds" not in k]
    assert shared and all(off[k] == on[k] for k in shared)


# ---------------------------------------------------------------------------------------- federated runs
@pytest.mark.parametrize("name", ["fedsa", "fedproto"])
def test_learns_on_digits(tmp_path, name):
    cfg = load_config("configs/default.yaml", [f"data.partitions_dir={tmp_path}", f"algorithm.name={name}",
                                               "train.rounds=4", "train.local_epochs=1"])
    history = run_in_process(cfg, prepare_data(cfg))
    assert "accuracy" not in history[-1]  # no global model
    assert all(r["bytes_up"] < 10 * 4 * (10 * 64 + 10) for r in history)  # prototypes and counts only
    for key in ("personalized_accuracy", "personalized_head"):
        assert history[-1][key] > 0.1 and history[-1][key] > history[0][key], key
    if name == "fedsa":
        assert history[-1]["personalized_anchor"] > 0.1


def test_claims_config_runs_every_setting_and_method():
    cfg = load_config("configs/claims/fedsa_digits.yaml")
    assert cfg.algorithm.name == "fedsa" and cfg.checkpoint.every == 0
    for setting in cfg.claims.settings.values():
        for method in cfg.claims.methods.values():
            with_overrides(cfg, {**setting, **method})  # every combination validates
    names = set(cfg.claims.methods)
    assert all({c.method, c.baseline} <= names and c.setting in cfg.claims.settings for c in cfg.claims.checks)
