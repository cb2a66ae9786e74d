"""FedFM and FedFM-Lite (docs/methods/fedfm.md) against hand computations: the CG and ℓ2 losses, the count-weighted anchor
aggregation and its missing-class rule, the warm-up, where anchors come from, Lite's communication schedule and
byte counts, the equal-budget FedAvg, and short federated runs."""
from __future__ import annotations

import math

import pytest
import torch

from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.server.federation import run_in_process
from tasks.algorithms.anchors import pooled_class_means
from tasks.algorithms.base import (
    ClientData,
    ClientUpdate,
    NoParams,
    RoundContext,
    Setup,
    TrainSettings,
    class_feature_stats,
)
from tasks.algorithms.fedavg import FedAvg
from tasks.algorithms.fedavg_periodic import FedAvgPeriodic, PeriodicParams
from tasks.algorithms.fedfm import (
    FedFM,
    FedFMLite,
    FedFMLiteParams,
    FedFMParams,
    contrastive_guiding_loss,
    l2_matching_loss,
)

H = torch.tensor([[3.0, 4.0], [1.0, 0.0]])
Y = torch.tensor([0, 2])
ANCHORS = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])  # C = 3, d = 2


def setup(num_classes: int = 3) -> Setup:
    return Setup(num_classes=num_classes, input_shape=(2,), num_clients=2, model_name="mlp",
                 model_options={"hidden": [4], "feature_dim": 2}, train=TrainSettings(batch_size=2), seed=0)


def context(round_idx: int = 0) -> RoundContext:
    return RoundContext(round_idx, 0, TrainSettings(batch_size=2), torch.Generator().manual_seed(7))


def client_data(labels: list[int]) -> ClientData:
    y = torch.tensor(labels)
    x = torch.randn(len(y), 2, generator=torch.Generator().manual_seed(1))
    return ClientData(0, x, y, torch.zeros(0, 2), torch.zeros(0, dtype=torch.long), 3)


# ------------------------------------------------------------------------------------------ losses
def test_contrastive_guiding_loss_by_hand():
    # ĥ = [0.6, 0.8] and [1, 0]; â = [1, 0], [0, 1], [1/√2, 1/√2]; logits = cos/τ with τ = 0.5
    r = 1 / math.sqrt(2)
    z0 = [0.6 / 0.5, 0.8 / 0.5, (0.6 + 0.8) * r / 0.5]
    z1 = [1 / 0.5, 0.0, r / 0.5]
    ce0 = -z0[0] + math.log(sum(math.exp(v) for v in z0))  # true class 0
    ce1 = -z1[2] + math.log(sum(math.exp(v) for v in z1))  # true class 2
    loss = contrastive_guiding_loss(H, Y, ANCHORS, tau=0.5)
    assert math.isclose(float(loss), (ce0 + ce1) / 2, rel_tol=1e-6)
    assert torch.isclose(contrastive_guiding_loss(2 * H, Y, 3 * ANCHORS, tau=0.5), loss)  # cosine: scale-free


def test_l2_matching_loss_by_hand():
    r = 1 / math.sqrt(2)
    # ‖[0.6, 0.8] − [1, 0]‖² = 0.8 and ‖[1, 0] − [r, r]‖² = 2 − 2r, mean over B·d = 4 entries
    expected = (0.8 + (1 - r) ** 2 + r**2) / 4
    assert math.isclose(float(l2_matching_loss(H, Y, ANCHORS)), expected, rel_tol=1e-6)
    assert math.isclose(expected, ((2 - 2 * 0.6) + (2 - 2 * r)) / 2 / 2, rel_tol=1e-12)  # (2 − 2cos)/d


@pytest.mark.parametrize("loss", ["cg", "l2"])
def test_matching_loss_trains_the_extractor_only(loss):
    algo = FedFM(FedFMParams(loss=loss, lam=1.0), setup())
    model = algo.new_model()
    x = torch.randn(4, 2, generator=torch.Generator().manual_seed(0))
    h = model.features(x)
    logits = model.classifier(h).detach()  # the CE term then moves nothing: only the matching term is left
    algo.local_loss(dict(model.named_parameters()), x, torch.tensor([0, 1, 2, 1]), h, logits,
                    {"anchors": ANCHORS}).backward()
    assert model.classifier.weight.grad is None and model.classifier.bias.grad is None
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.extractor_parameters())


def test_zero_anchors_give_a_constant_loss_without_nan():
    h = H.clone().requires_grad_(True)
    loss = contrastive_guiding_loss(h, Y, torch.zeros(3, 2), tau=0.1)
    loss.backward()
    assert math.isclose(float(loss.detach()), math.log(3), rel_tol=1e-6) and torch.equal(h.grad, torch.zeros(2, 2))


# ----------------------------------------------------------------------------------- aggregation
def test_count_weighted_anchor_aggregation_and_missing_classes():
    previous = torch.tensor([[9.0, 9.0], [8.0, 8.0], [7.0, 7.0]])
    sums = [torch.tensor([[2.0, 2.0], [0.0, 0.0], [0.0, 0.0]]), torch.tensor([[4.0, 4.0], [3.0, 6.0], [0.0, 0.0]])]
    counts = [torch.tensor([2.0, 0.0, 0.0]), torch.tensor([1.0, 3.0, 0.0])]
    out = pooled_class_means(sums, counts, previous)
    # class 0: (2 + 4)/(2 + 1) = 2; class 1: only client 2, [3, 6]/3; class 2: nobody holds it → previous row
    assert torch.equal(out, torch.tensor([[2.0, 2.0], [1.0, 2.0], [7.0, 7.0]]))


STATS = [{"sums": torch.tensor([[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]), "counts": torch.tensor([1.0, 0.0, 0.0])},
         {"sums": torch.tensor([[3.0, 3.0], [2.0, 0.0], [0.0, 0.0]]), "counts": torch.tensor([1.0, 1.0, 0.0])}]
POOLED = torch.tensor([[2.0, 2.0], [2.0, 0.0], [0.0, 0.0]])  # (1 + 3)/2, [2, 0]/1, nobody: the zero start


def test_fedfm_server_builds_the_rounds_anchors_from_the_pre_round_statistics():
    algo = FedFM(FedFMParams(), setup())
    state = algo.init_global()
    anchors = algo.server_pre_round(state, STATS, 0)["anchors"]
    assert torch.equal(anchors, POOLED) and not anchors.isnan().any()
    assert algo.payload({**state, "anchors": anchors}, 0)["anchors"] is anchors  # what the clients train against


def test_lite_server_aggregates_anchors_from_the_updates_by_class_counts_not_client_sizes():
    algo = FedFMLite(FedFMLiteParams(period=1), setup())
    state = algo.init_global()
    model = state["model"]
    ups = [ClientUpdate(0, 100, model, STATS[0]), ClientUpdate(1, 1, model, STATS[1])]
    assert torch.equal(algo.aggregate(state, ups, 0)["anchors"], POOLED)


# ---------------------------------------------------------------------------------------- client
def test_fedfm_anchor_statistics_come_from_the_received_global_model_before_training():
    algo = FedFM(FedFMParams(warmup_rounds=0, lam=1.0), setup())
    state = algo.init_global()
    data = client_data([0, 1, 1, 0, 1])
    stats = algo.client_pre_round(algo.payload(state, 0), data, {}, context())
    sums, counts = class_feature_stats(algo.new_model(), data.x, data.y, 3)  # w⁰, the payload's model
    assert torch.allclose(stats["sums"], sums.float()) and torch.equal(stats["counts"], counts.float())
    update, _ = algo.client_update(algo.payload(state, 0), data, {}, context())
    assert update.stats == {}  # the update carries the model only: the statistics went up before training


def test_lite_anchor_statistics_come_from_the_trained_model():
    algo = FedFMLite(FedFMLiteParams(warmup_rounds=0, lam=1.0, period=1), setup())
    state = algo.init_global()
    data = client_data([0, 1, 1, 0, 1])
    update, client_state = algo.client_update(algo.payload(state, 0), data, {}, context())
    trained = algo.working_model(update.tensors, key="check")
    sums, _ = class_feature_stats(trained, data.x, data.y, 3)
    assert torch.allclose(update.stats["sums"], sums.float())
    assert all(torch.equal(client_state["model"][k], v) for k, v in update.tensors.items())


def test_warmup_rounds_are_plain_fedavg():
    data = client_data([0, 1, 1, 0, 1, 2])
    fm = FedFM(FedFMParams(warmup_rounds=2, lam=5.0), setup())
    avg = FedAvg(NoParams(), setup())
    state = fm.init_global()
    state["anchors"] = ANCHORS
    warm = [fm.client_update(fm.payload(state, t), data, {}, context(t))[0].tensors for t in (1, 2)]
    plain = avg.client_update({"model": state["model"]}, data, {}, context(1))[0].tensors
    assert all(torch.equal(warm[0][k], plain[k]) for k in plain)
    assert not all(torch.equal(warm[1][k], plain[k]) for k in plain)  # round 2 = T_s: FM on


# ----------------------------------------------------------------------------- Lite's schedule
def test_lite_payload_and_upload_schedule():
    algo = FedFMLite(FedFMLiteParams(period=3, warmup_rounds=0, lam=1.0), setup())
    state = algo.init_global()
    assert [("model" in algo.payload(state, t)) for t in range(7)] == [True, False, False, True, False, False, True]
    assert all("anchors" in algo.payload(state, t) for t in range(7))
    assert [algo.uploads_model(t) for t in range(6)] == [False, False, True, False, False, True]
    data = client_data([0, 1, 1, 0, 1])
    update, client_state = algo.client_update(algo.payload(state, 0), data, {}, context(0))
    assert update.tensors == {} and set(update.stats) == {"sums", "counts"}
    # a round without a model: the client trains on from its own model; the server keeps the global model
    again, _ = algo.client_update(algo.payload(state, 1), data, client_state, context(1))
    fresh, _ = algo.client_update(algo.payload(state, 0), data, {}, context(1))
    assert not torch.equal(again.stats["sums"], fresh.stats["sums"])
    new = algo.aggregate(state, [update], 0)
    assert new["model"] is state["model"] and not torch.equal(new["anchors"], state["anchors"])


def lite_config(tmp_path, name: str, rounds: int, *extra: str):
    return load_config("configs/default.yaml", [
        f"algorithm.name={name}", f"train.rounds={rounds}", f"data.partitions_dir={tmp_path}", "train.optimizer.lr=0.1",
        "algorithm.fedfm.warmup_rounds=1", "algorithm.fedfm.lam=1", "algorithm.fedfm_lite.warmup_rounds=1",
        "algorithm.fedfm_lite.lam=1", "algorithm.fedfm_lite.period=2", "algorithm.fedavg_periodic.period=2", *extra])


def test_byte_counts_show_lites_saving(tmp_path):
    cfg = lite_config(tmp_path, "fedfm_lite", 4, "train.local_epochs=1")
    data = prepare_data(cfg)
    model_floats = (64 * 128 + 128) + (128 * 64 + 64) + (64 * 10 + 10)  # the default MLP, 64 → 128 → 64 → 10
    k, anchors, counts = 10, 10 * 64, 10
    lite = run_in_process(cfg, data)
    fm = run_in_process(lite_config(tmp_path, "fedfm", 4, "train.local_epochs=1"), data)
    periodic = run_in_process(lite_config(tmp_path, "fedavg_periodic", 4, "train.local_epochs=1"), data)
    for t in range(4):
        sync_down, sync_up = t % 2 == 0, t % 2 == 1
        assert lite[t]["bytes_down"] == 4 * k * (anchors + model_floats * sync_down)
        assert lite[t]["bytes_up"] == 4 * k * (anchors + counts + model_floats * sync_up)
        assert fm[t]["bytes_down"] == 4 * k * (anchors + model_floats)
        assert fm[t]["bytes_up"] == 4 * k * (anchors + counts + model_floats)
        assert periodic[t]["bytes_down"] == 4 * k * model_floats * sync_down
        assert periodic[t]["bytes_up"] == 4 * k * model_floats * sync_up
    # over T rounds: T·D + ⌈T/a⌉·N per client and direction (plus the class counts going up)
    assert lite[-1]["bytes_total"] == 4 * k * (4 * anchors + 2 * model_floats + 4 * anchors + 4 * counts + 2 * model_floats)
    # the global model changes only in rounds with an upload
    assert lite[0]["accuracy"] == periodic[0]["accuracy"]  # still w⁰ after round 0
    assert "classifier_update_cosine" not in lite[0]
    assert "classifier_update_cosine" in lite[1]


def test_periodic_fedavg_keeps_its_model_between_syncs():
    algo = FedAvgPeriodic(PeriodicParams(period=2), setup())
    state = algo.init_global()
    data = client_data([0, 1, 1, 0, 1])
    first, client_state = algo.client_update(algo.payload(state, 0), data, {}, context(0))
    assert first.tensors == {} and algo.aggregate(state, [first], 0) is state
    second, _ = algo.client_update(algo.payload(state, 1), data, client_state, context(1))
    assert algo.payload(state, 1) == {} and second.tensors
    new = algo.aggregate(state, [second], 1)
    assert all(torch.equal(new["model"][k], v) for k, v in second.tensors.items())


# ------------------------------------------------------------------------------- federated runs
@pytest.mark.parametrize("name", ["fedfm", "fedfm_lite"])
def test_fedfm_learns_on_digits(tmp_path, name):
    history = run_in_process(cfg := lite_config(tmp_path, name, 6), prepare_data(cfg))
    acc = [m["accuracy"] for m in history]
    assert acc[-1] > 0.2 and acc[-1] > acc[0]
    last = history[-1]
    assert {"classifier_update_cosine", "anchor_min_distance", "feature_anchor_distance",
            "feature_anchor_distance_rel"} <= set(last)
    assert all(math.isfinite(m["anchor_min_distance"]) for m in history)
