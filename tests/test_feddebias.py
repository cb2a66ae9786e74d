"""FedDebias (docs/methods/feddebias.md): pseudo-data built once, each loss against hand computations, the max step
touching θ only and the min step leaving it alone, uniform aggregation, and short federated runs on digits."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from orchestrator.clients.client_calls import CallKind, ClientCall, ClientResults
from orchestrator.clients.client_host import ClientHost
from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.server.federation import Server, in_process_calls
from tasks.algorithms import ALGORITHMS, ClientData, ClientUpdate, RoundContext, Setup, TrainSettings
from tasks.algorithms.base import make_optimizer, state_of, step
from tasks.algorithms.feddebias import (
    FedDebias,
    FedDebiasParams,
    debias_contrastive_loss,
    max_step,
    min_loss,
    mix_pseudo,
    projection_head,
    pseudo_owners,
    rsm_samples,
    soft_cross_entropy,
    temperature_scales,
    uniform_labels,
)
from tasks.models import build_model

# the hand-computation tensors: cos(z_p, z_g) = [1, 1/√2], cos(z_p, z_x) = [0, 1/√2], cos(z_p, z_p) = [1, 1]
Z_P = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
Z_G = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
Z_X = torch.tensor([[0.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
DIGITS = ["data.partition.kind=dirichlet_equal", "data.pad=1", "data.domains.kind=rotation",
          "data.domains.angles=[0,15,30,45,60,75,90,105,120,135]", "data.domains.assign=per_client",
          "data.test_fraction=0.2", "data.split_seed=0", "data.client_test_fraction=0.0", "train.local_steps=10",
          "train.optimizer.lr=0.1", "train.optimizer.weight_decay=0.0", "tracking.enabled=false",
          "algorithm.name=feddebias"]


def softplus(v: float) -> float:
    return math.log1p(math.exp(v))


def context(lr: float = 0.1) -> RoundContext:
    return RoundContext(round=0, seed=0, train=TrainSettings(lr=lr), generator=torch.Generator().manual_seed(0))


def snapshot(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


def changed(before: dict[str, torch.Tensor], module: nn.Module) -> bool:
    return any(not torch.equal(before[k], v) for k, v in module.state_dict().items())


def algorithm(num_clients: int = 3, batch_size: int = 8, **params) -> FedDebias:
    setup = Setup(num_classes=10, input_shape=(1, 2, 2), num_clients=num_clients, model_name="mlp",
                  model_options={"hidden": [8], "feature_dim": 4}, train=TrainSettings(batch_size=batch_size), seed=3)
    return FedDebias(FedDebiasParams(**params), setup)


def constant_client(cid: int, n: int = 6) -> ClientData:
    """A client whose images are all the constant cid + 1, so its RSM samples are too."""
    x = torch.full((n, 1, 2, 2), float(cid + 1))
    y = torch.arange(n) % 10
    return ClientData(cid, x, y, x[:0], y[:0], num_classes=10)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models on a shared 2-core machine: intra-op threads only add contention."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    cfg = load_config("configs/default.yaml", [*DIGITS, f"data.partitions_dir={tmp_path_factory.mktemp('parts')}"])
    return cfg, prepare_data(cfg)


def run_rounds(digits, rounds: int, *overrides: str):
    """run_in_process, keeping the server, the host and every round's payload for inspection."""
    base, data = digits
    cfg = load_config("configs/default.yaml", [*DIGITS, f"data.partitions_dir={base.data.partitions_dir}",
                                               f"train.rounds={rounds}", *overrides])
    host, server = ClientHost(cfg, data, list(range(data.num_clients))), Server(cfg, data)
    server.setup([host.setup_contribution(c) for c in range(data.num_clients)])
    payloads = []

    call = in_process_calls(host)

    def recording(request: ClientCall) -> ClientResults:
        if request.kind is CallKind.UPDATE:
            payloads.append(request.payload)
        return call(request)

    for _ in range(rounds):
        server.run_round(recording)
    return server, host, payloads


@pytest.fixture(scope="module")
def feddebias_run(digits):
    """Six rounds of FedDebias, counting the one-off setup calls."""
    calls = {"client": 0, "server": 0}
    client_setup, server_setup = FedDebias.client_setup, FedDebias.server_setup

    def count_client(self, *a):
        calls["client"] += 1
        return client_setup(self, *a)

    def count_server(self, *a):
        calls["server"] += 1
        return server_setup(self, *a)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(FedDebias, "client_setup", count_client)
        mp.setattr(FedDebias, "server_setup", count_server)
        return (*run_rounds(digits, 6), calls)


# ----------------------------------------------------------------------------------------- pseudo-data
def test_rsm_sample_is_the_mean_of_m_local_images():
    x = torch.arange(5.0).reshape(5, 1, 1, 1)  # images 0, 1, 2, 3, 4
    means = rsm_samples(x, count=7, per_sample=10, generator=torch.Generator().manual_seed(0))
    assert means.shape == (7, 1, 1, 1)
    tenfold = means.flatten() * 10  # a sum of 10 draws from {0..4}: an integer in [0, 40]
    assert torch.allclose(tenfold, tenfold.round(), atol=1e-4)
    assert bool((tenfold >= 0).all()) and bool((tenfold <= 40).all())
    assert len(set(tenfold.round().tolist())) > 1  # draws differ between samples


def test_pseudo_data_slots_come_from_their_owner_with_the_seed_1000_plus_s_rng():
    algo = algorithm(num_clients=3, batch_size=8)
    contributions = [algo.client_setup(constant_client(c), torch.Generator()) for c in range(3)]
    state = algo.server_setup(algo.init_global(), contributions)
    owners = torch.randint(3, (8,), generator=torch.Generator().manual_seed(1000 + 3))
    assert torch.equal(pseudo_owners(1003, 3, 8), owners)
    assert sum(len(c["slots"]) for c in contributions) == 8  # each client uploads only its own slots
    assert state["pseudo_x"].shape == (8, 1, 2, 2)  # |D_p| = B
    expected = (owners.float() + 1)[:, None, None, None].expand(8, 1, 2, 2)
    assert torch.equal(state["pseudo_x"], expected)  # slot j is a mean of its owner's images only


def test_pseudo_labels_are_uniform():
    labels = uniform_labels(4, 10)
    assert labels.shape == (4, 10)
    assert torch.allclose(labels, torch.full((4, 10), 0.1))


def test_pseudo_data_is_built_once_sent_once_and_kept_by_every_client(feddebias_run):
    server, host, payloads, calls = feddebias_run
    assert calls == {"client": 10, "server": 1}
    pseudo = server.state["pseudo_x"]
    assert pseudo.shape == (32, 1, 10, 10)
    assert ["pseudo_x" in p for p in payloads] == [True] + [False] * 5
    assert torch.equal(payloads[0]["pseudo_x"], pseudo)
    for cid in range(10):
        assert torch.equal(host.states[cid]["pseudo_x"], pseudo)
    h = server.history
    assert h[0]["bytes_down"] - h[1]["bytes_down"] == 10 * pseudo.numel() * 4
    assert not bool(server.state["pseudo_pending"].any())


def test_a_client_that_lost_the_pseudo_data_trains_plainly_and_gets_it_again():
    algo = algorithm(num_clients=1)
    data = constant_client(0)
    state = algo.server_setup(algo.init_global(), [algo.client_setup(data, torch.Generator())])
    state = {**state, "pseudo_pending": torch.zeros(1, dtype=torch.bool)}  # confirmed earlier
    payload = algo.payload(state, 3)
    assert "pseudo_x" not in payload
    update, client_state = algo.client_update(payload, data, {}, context())
    assert update.metrics["pseudo_missing"] == 1.0
    state = algo.aggregate(state, [update], 3)
    assert "pseudo_x" in algo.payload(state, 4)


def test_mixture_mixes_each_pseudo_sample_with_a_local_sample_and_its_label():
    x_p, y_p = torch.zeros(3, 1, 2, 2), uniform_labels(3, 10)
    x, y = torch.ones(1, 1, 2, 2), torch.tensor([2])  # one local sample: every draw is it
    x_mix, y_mix = mix_pseudo(x_p, y_p, x, y, 1, torch.Generator().manual_seed(0))
    assert torch.equal(x_mix, torch.full((3, 1, 2, 2), 0.5))  # (x_p + x_k) / 2
    expected = torch.full((3, 10), 0.05)
    expected[:, 2] = 0.55  # (0.1 + 1) / 2
    assert torch.allclose(y_mix, expected)


def test_mixture_pseudo_data_trains_all_parts():
    algo = algorithm(num_clients=1, pseudo_data="mixture")
    data = constant_client(0)
    state = algo.server_setup(algo.init_global(), [algo.client_setup(data, torch.Generator())])
    payload = algo.payload(state, 0)
    update, client_state = algo.client_update(payload, data, {}, context())
    assert torch.equal(client_state["pseudo_x"], state["pseudo_x"])
    assert any(not torch.equal(update.tensors["projector." + k], v) for k, v in state["projector"].items())
    assert any(not torch.equal(update.tensors[k], v) for k, v in state["model"].items())


# ---------------------------------------------------------------------------------------------- losses
def test_component_1_is_cross_entropy_against_the_uniform_label():
    logits = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    # row 1: logsumexp(1, 2, 3) − mean(1, 2, 3); row 2: log 3
    expected = (math.log(math.exp(1) + math.exp(2) + math.exp(3)) - 2.0 + math.log(3.0)) / 2
    assert soft_cross_entropy(logits, uniform_labels(2, 3)).item() == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx(1.2531091, rel=1e-6)


def test_contrastive_loss_uses_the_real_local_negative_and_multiplicative_tau():
    loss = debias_contrastive_loss(nn.Identity(), Z_P, Z_G, Z_X, 2.0, 2.0)
    # per row softplus(τ2·cos(z_p, z_x) − τ1·cos(z_p, z_g)): softplus(0 − 2), softplus(2/√2 − 2/√2)
    expected = (softplus(-2.0) + math.log(2.0)) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx(0.4100376, rel=1e-6)
    wrong_negative = (softplus(0.0) + softplus(2.0 - 2.0 / math.sqrt(2))) / 2  # P(z_p) vs P(z_p): Eq. 5's typo
    assert loss.item() != pytest.approx(wrong_negative, rel=1e-3)


def test_temperature_conventions():
    assert temperature_scales(FedDebiasParams(tau1=2.0, tau2=0.5)) == (2.0, 0.5)
    assert temperature_scales(FedDebiasParams(tau1=2.0, tau2=0.5, temperature="divide")) == (0.5, 2.0)
    divided = debias_contrastive_loss(nn.Identity(), Z_P, Z_G, Z_X, *temperature_scales(
        FedDebiasParams(temperature="divide")))
    assert divided.item() == pytest.approx((softplus(-0.5) + math.log(2.0)) / 2, rel=1e-6)
    # τ2 = 0: the negative term is the constant exp(0) = 1
    no_negative = debias_contrastive_loss(nn.Identity(), Z_P, Z_G, Z_X, 2.0, 0.0)
    assert no_negative.item() == pytest.approx((softplus(-2.0) + softplus(-2.0 / math.sqrt(2))) / 2, rel=1e-6)


def test_mixture_correction_shifts_the_negative_anchor():
    weight = torch.tensor([1.0, 0.5])
    loss = debias_contrastive_loss(nn.Identity(), Z_P, Z_G, Z_X, 2.0, 2.0, weight)
    # z_p − w·z_x = [1, −1, 0] (cos with z_x: −1/√2) and [−0.5, 0.5, 0] (cos with z_x: 0)
    r = 1.0 / math.sqrt(2)
    expected = (softplus(-2.0 * r - 2.0) + softplus(0.0 - 2.0 * r)) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_contrastive_gradients_reach_both_local_branches_and_not_the_global_one():
    z_p, z_x = Z_P.clone().requires_grad_(), Z_X.clone().requires_grad_()
    z_g = Z_G.clone().requires_grad_()
    torch.manual_seed(0)
    debias_contrastive_loss(projection_head(3), z_p, z_g.detach(), z_x, 2.0, 2.0).backward()
    assert z_p.grad.abs().sum() > 0 and z_x.grad.abs().sum() > 0
    assert z_g.grad is None


# ----------------------------------------------------------------------------------- max and min steps
def tiny_model_and_batch():
    torch.manual_seed(0)
    model = build_model("mlp", (1, 2, 2), 10, {"hidden": [8], "feature_dim": 4})
    projector = projection_head(4)
    gen = torch.Generator().manual_seed(1)
    x, x_p = torch.randn(6, 1, 2, 2, generator=gen), torch.randn(6, 1, 2, 2, generator=gen)
    y = torch.arange(6)
    with torch.no_grad():
        z_g = model.features(x_p) + 0.3 * torch.randn(6, 4, generator=gen)  # a different "global" extractor
    return model, projector, x, y, x_p, z_g


def test_max_step_changes_only_the_projector_and_raises_the_contrastive_loss():
    model, projector, x, y, x_p, z_g = tiny_model_and_batch()
    p, ctx = FedDebiasParams(), context(lr=0.5)
    z_x, z_p = model.features(x), model.features(x_p)
    before_model, before_proj = snapshot(model), snapshot(projector)
    con_before = debias_contrastive_loss(projector, z_p, z_g, z_x, 2.0, 2.0).item()
    max_step(projector, make_optimizer(projector.parameters(), ctx), z_p, z_g, z_x, p, ctx)
    assert changed(before_proj, projector)
    assert not changed(before_model, model)
    assert all(q.grad is None for q in model.parameters())
    assert debias_contrastive_loss(projector, z_p, z_g, z_x, 2.0, 2.0).item() > con_before  # ascent


def test_min_step_leaves_the_projector_unchanged_and_trains_extractor_and_classifier():
    model, projector, x, y, x_p, z_g = tiny_model_and_batch()
    p, ctx = FedDebiasParams(), context()
    before_body, before_head, before_proj = snapshot(model.body), snapshot(model.classifier), snapshot(projector)
    z_x, z_p = model.features(x), model.features(x_p)
    loss = min_loss(model, projector, z_p, z_g, z_x, y, uniform_labels(6, 10), p)
    step(make_optimizer(model.parameters(), ctx), loss, model, ctx)
    assert not changed(before_proj, projector)
    assert changed(before_body, model.body) and changed(before_head, model.classifier)


def test_min_loss_is_the_sum_of_its_switched_on_terms():
    model, projector, x, y, x_p, z_g = tiny_model_and_batch()
    z_x, z_p, y_p = model.features(x), model.features(x_p), uniform_labels(6, 10)
    ce = nn.functional.cross_entropy(model.classifier(z_x), y).item()
    pseudo = soft_cross_entropy(model.classifier(z_p), y_p).item()
    con = debias_contrastive_loss(projector, z_p, z_g, z_x, 2.0, 2.0).item()
    full = min_loss(model, projector, z_p, z_g, z_x, y, y_p, FedDebiasParams(lam=0.7, mu=0.3)).item()
    assert full == pytest.approx(ce + 0.7 * pseudo + 0.3 * con, rel=1e-5)
    comp1 = min_loss(model, projector, z_p, z_g, z_x, y, y_p, FedDebiasParams(use_contrastive=False)).item()
    assert comp1 == pytest.approx(ce + pseudo, rel=1e-5)
    comp2 = min_loss(model, projector, z_p, z_g, z_x, y, y_p, FedDebiasParams(use_pseudo=False)).item()
    assert comp2 == pytest.approx(ce + 0.5 * con, rel=1e-5)


# ----------------------------------------------------------------------------------------------- server
def test_aggregation_is_uniform_over_model_and_projector():
    algo = algorithm()
    state = {"model": {"w": torch.zeros(1)}, "projector": {"a": torch.zeros(1)}}
    updates = [ClientUpdate(0, 1, tensors={"w": torch.tensor([0.0]), "projector.a": torch.tensor([2.0])}),
               ClientUpdate(1, 3, tensors={"w": torch.tensor([4.0]), "projector.a": torch.tensor([6.0])})]
    new = algo.aggregate(state, updates, 0)
    assert torch.equal(new["model"]["w"], torch.tensor([2.0]))  # sample-weighted would give 3
    assert torch.equal(new["projector"]["a"], torch.tensor([4.0]))


def test_registered_with_searchable_weights_and_temperatures():
    assert ALGORITHMS.get("feddebias") is FedDebias
    space = FedDebiasParams.search_space()
    assert {"lam", "mu", "tau1", "tau2"} <= set(space)
    assert space["tau2"]["low"] == 0.0 and space["lam"]["low"] == 0.1
    with pytest.raises(ValueError, match=r"temperature 'divide' needs tau1 > 0 and tau2 > 0"):
        FedDebiasParams(temperature="divide", tau2=0.0)


# ------------------------------------------------------------------------------------- federated runs
def test_feddebias_learns_on_rotated_digits_and_shares_the_projector(feddebias_run):
    server = feddebias_run[0]
    acc = [r["accuracy"] for r in server.history]
    assert acc[-1] > 0.1 and acc[-1] > acc[0]
    assert "accuracy_worst" in server.history[-1]
    model_bytes = sum(v.numel() * 4 for v in server.state["model"].values())
    projector_bytes = sum(v.numel() * 4 for v in server.state["projector"].values())
    assert server.history[-1]["bytes_up"] == 10 * (model_bytes + projector_bytes)


def test_without_the_max_step_the_projector_stays_at_its_initialisation(digits):
    server, _, _ = run_rounds(digits, 2, "algorithm.feddebias.max_step=false",
                              "algorithm.feddebias.use_pseudo=false")
    initial = state_of(server.algorithm.new_projector())
    assert all(torch.equal(initial[k], v) for k, v in server.state["projector"].items())


def test_component_1_alone_has_no_projector_and_learns(digits):
    server, _, _ = run_rounds(digits, 4, "algorithm.feddebias.use_contrastive=false")
    assert "projector" not in server.state
    acc = [r["accuracy"] for r in server.history]
    assert acc[-1] > 0.1 and acc[-1] > acc[0]


# ------------------------------------------------------------------------- "+ Mixup" (Table 1, use_Mixup)
def test_min_loss_on_a_mixup_batch_takes_the_ce_against_the_mixed_label():
    model, projector, x, y, x_p, z_g = tiny_model_and_batch()
    y_other, lam = y.flip(0), 0.3
    z_x, z_p, y_p = model.features(0.3 * x + 0.7 * x.flip(0)), model.features(x_p), uniform_labels(6, 10)
    logits = model.classifier(z_x)
    ce = 0.3 * nn.functional.cross_entropy(logits, y).item() + 0.7 * nn.functional.cross_entropy(logits, y_other).item()
    pseudo = soft_cross_entropy(model.classifier(z_p), y_p).item()
    con = debias_contrastive_loss(projector, z_p, z_g, z_x, 2.0, 2.0).item()
    loss = min_loss(model, projector, z_p, z_g, z_x, y, y_p, FedDebiasParams(mixup=True), mix=(y_other, lam)).item()
    assert loss == pytest.approx(ce + pseudo + 0.5 * con, rel=1e-5)


def test_mixture_pseudo_data_takes_a_mixup_batchs_soft_labels():
    x_p, y_p = torch.zeros(2, 1, 2, 2), uniform_labels(2, 10)
    x = torch.stack([torch.full((1, 2, 2), 2.0), torch.full((1, 2, 2), 4.0)])
    soft = torch.zeros(2, 10)
    soft[0, 1], soft[0, 2], soft[1, 3] = 0.25, 0.75, 1.0
    idx = torch.randint(2, (2, 1), generator=torch.Generator().manual_seed(5))
    mixed_x, mixed_y = mix_pseudo(x_p, y_p, x, soft, 1, torch.Generator().manual_seed(5))
    for j in range(2):
        k = int(idx[j, 0])
        assert torch.equal(mixed_x[j], x[k] / 2)
        assert torch.allclose(mixed_y[j], (y_p[j] + soft[k]) / 2)
    assert torch.allclose(mixed_y.sum(dim=1), torch.ones(2))


def test_feddebias_without_its_components_on_mixup_is_the_mixup_baseline():
    """With both components off, `mixup: true` trains exactly as the `mixup` method: the same draws, one step."""
    from tests.method_fixtures import client, one_step, tiny_method
    from tests.method_fixtures import context as round_context

    train = one_step(lr=0.5)
    data = client()
    plain = tiny_method("mixup", train=train, alpha=0.4)
    mixed = tiny_method("feddebias", train=train, use_pseudo=False, use_contrastive=False, mixup=True,
                        mixup_alpha=0.4)
    state = plain.init_global()
    expected, _ = plain.client_update(plain.payload(state, 0), data, {}, round_context(train, data))
    got, _ = mixed.client_update(mixed.payload(state, 0), data, {}, round_context(train, data))
    assert set(got.tensors) == set(expected.tensors)
    for name, value in expected.tensors.items():
        assert torch.allclose(got.tensors[name], value, atol=1e-7), name
    unmixed = tiny_method("feddebias", train=train, use_pseudo=False, use_contrastive=False)
    other, _ = unmixed.client_update(unmixed.payload(state, 0), data, {}, round_context(train, data))
    assert any(not torch.allclose(other.tensors[k], v) for k, v in expected.tensors.items())


def test_feddebias_plus_mixup_trains_every_part_with_either_pseudo_data(digits):
    for pseudo in ("rsm", "mixture"):
        server, _, _ = run_rounds(digits, 2, "algorithm.feddebias.mixup=true",
                                  f"algorithm.feddebias.pseudo_data={pseudo}")
        initial = state_of(server.algorithm.new_projector())
        assert any(not torch.equal(initial[k], v) for k, v in server.state["projector"].items())
        acc = [r["accuracy"] for r in server.history]
        assert all(math.isfinite(a) for a in acc) and acc[-1] > 0.1
