"""FedDebias's Table 10 baselines by hand on tiny tensors (docs/methods/mixup.md, groupdro.md, dann.md, fedmix.md):
Mixup's mixed loss and one step, GroupDRO's weights over two rounds, DANN's reversed gradient, FedMix's batch means
and its first-order loss on a linear model."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tasks.algorithms.base import ClientUpdate
from tasks.algorithms.dann import DISCRIMINATOR_PREFIX, GradientReversal, dann_loss
from tasks.algorithms.fedmix import batch_means, fedmix_loss
from tasks.algorithms.mixup import mixing_rng, mixup_loss
from tests.method_fixtures import client, context, one_step, tiny_method


def filled(state, value: float) -> dict[str, torch.Tensor]:
    return {k: torch.full_like(v, value) for k, v in state.items()}


# ------------------------------------------------------------------------------------------------ Mixup
def test_mixup_loss_is_the_ce_against_the_mixed_label_by_hand():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    y, y_other = torch.tensor([0, 1]), torch.tensor([1, 1])
    # −log softmax: row 1 → (log(1 + e^−2), 2 + log(1 + e^−2)); row 2 → (1 + log(1 + e^−1), log(1 + e^−1))
    a, b = math.log(1 + math.exp(-2)), math.log(1 + math.exp(-1))
    ce_y, ce_other = (a + b) / 2, (2 + a + b) / 2
    assert float(mixup_loss(logits, y, y_other, 0.3)) == pytest.approx(0.3 * ce_y + 0.7 * ce_other, rel=1e-6)


def test_mixup_takes_one_sgd_step_on_the_mixed_batch():
    train = one_step(lr=0.5)
    method, data = tiny_method("mixup", train=train, alpha=0.4), client()
    ctx = context(train, data)
    state = method.init_global()
    update, _ = method.client_update(method.payload(state, 0), data, {}, ctx)
    # the same batch (one full batch: the round generator's permutation) and the same draws, by hand
    order = torch.randperm(3, generator=torch.Generator().manual_seed(0))
    x, y = data.x[order], data.y[order]
    rng = mixing_rng(0, 0, 0)
    lam = float(rng.beta(0.4, 0.4))
    perm = torch.from_numpy(rng.permutation(3))
    model = method.new_model()
    model.load_state_dict(state["model"])
    loss = lam * F.cross_entropy(model(lam * x + (1 - lam) * x[perm]), y) + (1 - lam) * F.cross_entropy(
        model(lam * x + (1 - lam) * x[perm]), y[perm])
    grads = torch.autograd.grad(loss, list(model.parameters()))
    for (name, p), g in zip(model.named_parameters(), grads):
        assert torch.allclose(update.tensors[name], p.detach() - 0.5 * g, atol=1e-6), name


# --------------------------------------------------------------------------------------------- GroupDRO
def test_groupdro_weights_grow_with_each_reported_loss():
    """n = (1, 3), losses (2, 0), η = 0.5: weights 1·e¹ and 3·e⁰, the models (3 and 1) averaged to
    (3e + 3)/(e + 3); next round losses (0, 2): log-weights (1, log 3 + 1), the average (3 + 3)/(1 + 3) = 1.5."""
    method = tiny_method("groupdro", step_size=0.5)
    state = method.init_global()
    ones = filled(state["model"], 1.0)

    def round_of(state, losses, values):
        updates = [ClientUpdate(i, n, tensors=filled(ones, v), metrics={"train_loss": loss})
                   for i, (n, loss, v) in enumerate(zip((1, 3), losses, values))]
        return method.aggregate(state, updates, 0)

    state = round_of(state, (2.0, 0.0), (3.0, 1.0))
    e = math.e
    for value in state["model"].values():
        assert torch.allclose(value, torch.full_like(value, (3 * e + 3) / (e + 3)))
    assert state["log_weights"].tolist() == pytest.approx([1.0, math.log(3)])
    state = round_of(state, (0.0, 2.0), (3.0, 1.0))
    for value in state["model"].values():
        assert torch.allclose(value, torch.full_like(value, 1.5))


def test_groupdro_with_no_step_is_fedavg():
    method, fedavg = tiny_method("groupdro", step_size=1e-12), tiny_method("fedavg")
    state = method.init_global()
    updates = [ClientUpdate(i, n, tensors=filled(state["model"], v), metrics={"train_loss": 5.0 * i})
               for i, (n, v) in enumerate(((2, 4.0), (6, 0.0)))]
    ours, theirs = method.aggregate(state, updates, 0)["model"], fedavg.aggregate(state, updates, 0)["model"]
    assert all(torch.allclose(ours[k], theirs[k]) for k in ours)


# ------------------------------------------------------------------------------------------------- DANN
def test_gradient_reversal_negates_the_gradient_only():
    h = torch.tensor([1.0, -2.0], requires_grad=True)
    out = GradientReversal.apply(h)
    assert torch.equal(out, h.detach())
    (3.0 * out).sum().backward()
    assert h.grad.tolist() == [-3.0, -3.0]


def test_dann_loss_by_hand():
    logits, domain_logits = torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, math.log(3.0), 0.0]])
    # CE = log 2; the domain CE for domain 1 = −log(3/5)
    expected = math.log(2) + 0.5 * -math.log(3 / 5)
    assert float(dann_loss(logits, torch.tensor([1]), domain_logits, 1, 0.5)) == pytest.approx(expected)


def test_dann_descends_the_domain_loss_for_the_discriminator_and_ascends_it_for_the_features():
    train = one_step(lr=0.1)
    method, data = tiny_method("dann", num_clients=3, train=train, weight=0.5, width=4), client(cid=2)
    state = method.init_global()
    update, _ = method.client_update(method.payload(state, 0), data, {}, context(train, data))
    order = torch.randperm(3, generator=torch.Generator().manual_seed(0))
    x, y = data.x[order], data.y[order]
    model, disc = method.new_model(), method.new_discriminator()
    model.load_state_dict(state["model"])
    disc.load_state_dict(state["discriminator"])
    h, logits = model(x, return_features=True)
    ce = F.cross_entropy(logits, y)
    domain_ce = F.cross_entropy(disc(h), torch.full((3,), 2))
    model_params, disc_params = list(model.named_parameters()), list(disc.named_parameters())
    g_ce = torch.autograd.grad(ce, [p for _, p in model_params], retain_graph=True, allow_unused=True)
    g_dom = torch.autograd.grad(domain_ce, [p for _, p in model_params] + [p for _, p in disc_params],
                                allow_unused=True)  # the classifier does not reach the discriminator

    def zero_if_unused(g, p):
        return torch.zeros_like(p) if g is None else g

    for i, (name, p) in enumerate(model_params):
        expected = p.detach() - 0.1 * (zero_if_unused(g_ce[i], p) - 0.5 * zero_if_unused(g_dom[i], p))
        assert torch.allclose(update.tensors[name], expected, atol=1e-6), name
    for j, (name, p) in enumerate(disc_params):
        expected = p.detach() - 0.1 * 0.5 * g_dom[len(model_params) + j]
        assert torch.allclose(update.tensors[DISCRIMINATOR_PREFIX + name], expected, atol=1e-6), name


def test_dann_averages_the_discriminator_with_the_model():
    method = tiny_method("dann", num_clients=2, width=4)
    state = method.init_global()
    tensors = {**state["model"], **{DISCRIMINATOR_PREFIX + k: v for k, v in state["discriminator"].items()}}
    updates = [ClientUpdate(0, 1, tensors=filled(tensors, 1.0)), ClientUpdate(1, 3, tensors=filled(tensors, 5.0))]
    new = method.aggregate(state, updates, 0)
    assert set(new["model"]) == set(state["model"]) and set(new["discriminator"]) == set(state["discriminator"])
    assert all(torch.allclose(v, torch.full_like(v, 4.0)) for part in ("model", "discriminator")
               for v in new[part].values())


# ----------------------------------------------------------------------------------------------- FedMix
def test_batch_means_by_hand():
    x = torch.tensor([[0.0], [2.0], [4.0], [6.0], [8.0]])
    y = torch.tensor([0, 1, 1, 0, 1])
    generator = torch.Generator().manual_seed(0)
    order = torch.randperm(5, generator=torch.Generator().manual_seed(0))
    mean_x, mean_y = batch_means(x, y, 2, 2, generator)
    assert mean_x.shape == (2, 1) and mean_y.shape == (2, 2)  # 5 // 2 means; the fifth sample left out
    for k in range(2):
        chunk = order[2 * k:2 * k + 2]
        assert float(mean_x[k, 0]) == float(x[chunk].mean())
        assert mean_y[k].tolist() == F.one_hot(y[chunk], 2).float().mean(dim=0).tolist()
    with pytest.raises(ValueError, match="token ids"):
        batch_means(torch.tensor([[1, 2]]), torch.tensor([0]), 2, 1, generator)


def test_fedmix_loss_on_a_linear_model_by_hand():
    """f(u) = W u: ∂CE(f(u), y)/∂u = Wᵀ(softmax(W u) − e_y); one sample, λ = 0.25."""
    model = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
    x, y = torch.tensor([[4.0, 2.0]]), torch.tensor([0])
    mean_x, mean_y = torch.tensor([[1.0, -1.0]]), torch.tensor([[0.5, 0.5]])
    lam = 0.25
    u = (1 - lam) * x[0]  # (3, 1.5)
    z = torch.tensor([3.0, 3.0])  # W u
    p = torch.softmax(z, dim=0)  # (0.5, 0.5)
    ce = -math.log(0.5)
    soft = -(0.5 * math.log(0.5) + 0.5 * math.log(0.5))
    grad_u = torch.tensor([[1.0, 0.0], [0.0, 2.0]]).T @ (p - torch.tensor([1.0, 0.0]))  # (−0.5, 1.0)
    taylor = float(grad_u @ mean_x[0])  # −0.5 − 1.0
    # the first-order term expands the (1 − λ)-weighted local term: (1 − λ)·λ·⟨∂CE/∂u, x̄_j⟩ (Eq. 5)
    expected = (1 - lam) * ce + lam * soft + (1 - lam) * lam * taylor
    assert expected == pytest.approx(0.75 * math.log(2) + 0.25 * math.log(2) - 0.75 * 0.25 * 1.5)
    assert float(fedmix_loss(model, x, y, mean_x, mean_y, lam)) == pytest.approx(expected, rel=1e-6)
    assert u.tolist() == [3.0, 1.5]


def test_fedmix_pools_every_clients_means_and_pairs_a_client_only_with_the_others():
    method = tiny_method("fedmix", num_clients=2, mean_size=1)
    contributions = [method.client_setup(client(cid), torch.Generator().manual_seed(cid)) for cid in (0, 1)]
    state = method.server_setup(method.init_global(), contributions)
    assert state["means_x"].shape == (6, 3) and state["means_owner"].tolist() == [0, 0, 0, 1, 1, 1]
    payload = method.payload(state, 0)
    assert set(payload) == {"model", "means_x", "means_y", "means_owner"}
    train = one_step()
    update, _ = method.client_update(payload, client(0), {}, context(train, client(0)))
    assert math.isfinite(update.metrics["train_loss"])
