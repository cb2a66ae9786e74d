"""FedPer, FedRep, FedBABU, FedRoD, Ditto and CReFF (docs/methods/<method>.md): each update against a hand
computation on tiny tensors, and the personalized model of docs/methods/fednh.md §12.1 (one local update from the
current global state, not kept)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

from tasks.algorithms import ALGORITHMS, ClientData, RoundContext, Setup, TrainSettings
from tasks.algorithms.base import state_of
from tasks.algorithms.creff import (
    averaged_class_gradients,
    head_gradient,
    match_distance,
    retrain_classifier,
    synthesise_features,
)
from tasks.algorithms.fedrod import balanced_softmax_loss, log_class_prior, personal_logits
from tasks.algorithms.personal import HEAD, body_of, final_update_context, head_of

LR = 0.1
TRAIN = TrainSettings(rounds=2, local_epochs=1, batch_size=64, lr=LR)  # one full-batch SGD step a pass


def algorithm(name: str, **params):
    cls = ALGORITHMS.get(name)
    setup = Setup(num_classes=3, input_shape=(4,), num_clients=2, model_name="mlp",
                  model_options={"hidden": [5], "feature_dim": 3}, train=TRAIN, seed=0)
    return cls(cls.Params(**params), setup)


def client(cid: int = 0, n: int = 6) -> ClientData:
    g = torch.Generator().manual_seed(cid)
    x, y = torch.randn(n, 4, generator=g), torch.tensor([0, 0, 1, 1, 0, 1][:n])
    return ClientData(cid, x, y, x[:2], y[:2], num_classes=3, global_x_test=x, global_y_test=y)


def ctx(round_idx: int = 0, cid: int = 0) -> RoundContext:
    return RoundContext(round=round_idx, seed=0, train=TRAIN, generator=torch.Generator().manual_seed(cid))


def round_of(alg, data: ClientData, state=None, round_idx: int = 0):
    server = alg.init_global()
    payload = alg.payload(server, round_idx)
    state = alg.init_client(data) if state is None else state
    update, kept = alg.client_update(payload, data, state, ctx(round_idx, data.client_id))
    return server, payload, update, kept


def sgd_step(model, tensors: dict, names: list[str], x, y, loss_of=None) -> dict:
    """One plain SGD step on `names` from `tensors`, computed apart from the engines."""
    leaves = {k: v.clone().requires_grad_(k in names) for k, v in tensors.items()}
    logits = functional_call(model, leaves, (x,))
    loss = F.cross_entropy(logits, y) if loss_of is None else loss_of(leaves, logits)
    grads = torch.autograd.grad(loss, [leaves[k] for k in names])
    return {**tensors, **{k: (tensors[k] - LR * g).detach() for k, g in zip(names, grads)}}


# ------------------------------------------------------------------------------------------- FedPer
def test_fedper_keeps_its_head_and_sends_the_body():
    alg, data = algorithm("fedper"), client()
    server, payload, update, kept = round_of(alg, data)
    assert set(payload["model"]) == set(update.tensors) == set(body_of(server["model"]))  # no head down or up
    model = alg.new_model()
    start = {**payload["model"], **alg.initial_head()}
    expected = sgd_step(model, start, list(start), data.x, data.y)  # body and head train together
    for k in update.tensors:
        assert torch.allclose(update.tensors[k], expected[k], atol=1e-6), k
    for k in kept["head"]:
        assert torch.allclose(kept["head"][k], expected[k], atol=1e-6), k
    other = round_of(alg, client(1))[2]
    new = alg.aggregate(server, [update, other], 0)["model"]
    n0, n1 = update.num_samples, other.num_samples
    for k in update.tensors:  # the body: FedAvg's sample-weighted mean
        assert torch.allclose(new[k], (n0 * update.tensors[k] + n1 * other.tensors[k]) / (n0 + n1), atol=1e-6)
    assert all(torch.equal(new[k], server["model"][k]) for k in head_of(new))  # GM keeps θ⁰'s head
    nxt = alg.local_objective(alg.payload({"model": new}, 1), data, kept, ctx(1))
    assert all(torch.equal(nxt.start[k], kept["head"][k]) for k in kept["head"])  # next round: its own head


# ------------------------------------------------------------------------------------------- FedRep
def test_fedrep_trains_the_head_with_the_body_held_then_the_body_with_the_new_head_by_hand():
    alg, data = algorithm("fedrep", head_epochs=1), client()
    server, payload, update, kept = round_of(alg, data)
    start = {**payload["model"], **alg.initial_head()}
    model = alg.new_model()
    with torch.no_grad():
        h = functional_call(model, start, (data.x,), {"return_features": True})[0]
    w, b = start[HEAD + "weight"], start[HEAD + "bias"]
    err = (torch.softmax(h @ w.T + b, dim=1) - F.one_hot(data.y, 3)) / len(data.y)  # ∂CE/∂z, by hand
    w1, b1 = w - LR * err.T @ h, b - LR * err.sum(dim=0)
    assert torch.allclose(kept["head"][HEAD + "weight"], w1, atol=1e-6)
    assert torch.allclose(kept["head"][HEAD + "bias"], b1, atol=1e-6)
    body = sgd_step(model, {**start, HEAD + "weight": w1, HEAD + "bias": b1}, list(payload["model"]), data.x, data.y)
    for k in update.tensors:
        assert torch.allclose(update.tensors[k], body[k], atol=1e-6), k


# ------------------------------------------------------------------------------------------ FedBABU
def test_fedbabu_holds_its_head_in_federation_and_fine_tunes_it_for_the_personalized_model():
    alg, data = algorithm("fedbabu", finetune_epochs=1), client()
    server, payload, update, kept = round_of(alg, data)
    assert set(payload["model"]) == set(update.tensors) == set(body_of(server["model"])) and kept == {}
    start = {**payload["model"], **alg.initial_head()}
    expected = sgd_step(alg.new_model(), start, list(payload["model"]), data.x, data.y)  # the head held
    for k in update.tensors:
        assert torch.allclose(update.tensors[k], expected[k], atol=1e-6), k
    assert all(torch.equal(alg.initial_head()[k], server["model"][k]) for k in alg.initial_head())
    tuned = alg.updated_state(payload, data, {}, ctx())  # the fine-tune moves every parameter, head included
    fine = sgd_step(alg.new_model(), start, list(start), data.x, data.y)
    for k in tuned:
        assert torch.allclose(tuned[k], fine[k], atol=1e-6), k
    assert not torch.equal(tuned[HEAD + "weight"], start[HEAD + "weight"])


# ------------------------------------------------------------------------------------------- FedRoD
def test_balanced_softmax_by_hand():
    logits, counts = torch.tensor([[1.0, 2.0, 0.0], [0.5, -1.0, 3.0]]), torch.tensor([3, 1, 0])
    prior = [3 / (4 + 1e-12), 1 / (4 + 1e-12), 1e-12 / (4 + 1e-12)]  # an absent class counts 1e-12 (the code)
    shifted = [[v + math.log(p) for v, p in zip(row, prior)] for row in logits.tolist()]
    ce = [-(s[y] - math.log(sum(math.exp(v) for v in s))) for s, y in zip(shifted, [0, 1])]
    loss = balanced_softmax_loss(logits, torch.tensor([0, 1]), log_class_prior(counts))
    assert loss.item() == pytest.approx(sum(ce) / 2, rel=1e-5)


def test_fedrod_personal_head_learns_on_detached_generic_logits():
    h = torch.randn(4, 3, requires_grad=True)
    generic = torch.randn(4, 2, requires_grad=True)
    params = {"personal_head.weight": torch.randn(2, 3, requires_grad=True), "personal_head.bias": torch.zeros(2)}
    out = personal_logits(params, h, generic)
    assert torch.allclose(out, generic + h @ params["personal_head.weight"].T)
    out.sum().backward()
    assert h.grad is None and generic.grad is None and params["personal_head.weight"].grad is not None


def test_fedrod_round_trains_the_generic_part_with_bsm_and_keeps_the_personal_head():
    alg, data = algorithm("fedrod"), client()
    server, payload, update, kept = round_of(alg, data)
    assert "personal_head.weight" not in update.tensors and set(kept["personal_head"]) == {
        "personal_head.weight", "personal_head.bias"}
    start = {**payload["model"], **alg.init_client(data)["personal_head"]}
    prior = log_class_prior(data.class_counts())
    model = alg.new_model()
    generic = sgd_step(model, start, list(payload["model"]), data.x, data.y,
                       lambda p, logits: balanced_softmax_loss(logits, data.y, prior))
    for k in update.tensors:
        assert torch.allclose(update.tensors[k], generic[k], atol=1e-6), k
    with torch.no_grad():
        h, z = functional_call(model, generic, (data.x,), {"return_features": True})
    w, b = generic["personal_head.weight"], generic["personal_head.bias"]
    err = (torch.softmax(z + h @ w.T + b, dim=1) - F.one_hot(data.y, 3)) / len(data.y)
    assert torch.allclose(kept["personal_head"]["personal_head.weight"], w - LR * err.T @ h, atol=1e-6)


# -------------------------------------------------------------------------------------------- Ditto
def test_ditto_personal_step_by_hand():
    alg, data = algorithm("ditto", lam=0.5), client()
    server = alg.init_global()
    payload = alg.payload(server, 0)
    personal = {k: v + 0.1 for k, v in payload["model"].items()}  # v_k ≠ w^t: the proximal pull shows
    update, kept = alg.client_update(payload, data, {"personal": personal}, ctx())
    model = alg.new_model()
    glob = sgd_step(model, payload["model"], list(payload["model"]), data.x, data.y)  # FedAvg's step
    for k in update.tensors:
        assert torch.allclose(update.tensors[k], glob[k], atol=1e-6), k
    leaves = {k: v.clone().requires_grad_(True) for k, v in personal.items()}
    grads = torch.autograd.grad(F.cross_entropy(functional_call(model, leaves, (data.x,)), data.y), list(leaves.values()))
    for (k, v), g in zip(personal.items(), grads):  # v − lr·(∇CE(v) + λ(v − w^t))
        assert torch.allclose(kept["personal"][k], v - LR * (g + 0.5 * (v - payload["model"][k])), atol=1e-6), k


# ------------------------------------------------ the personal part's optimizer (FedNH's code: plain SGD)
# momentum, weight decay and a clip that binds: the run's optimizer differs from plain SGD from the first step
RUN = TrainSettings(rounds=2, local_epochs=2, batch_size=64, lr=LR, momentum=0.9, weight_decay=0.1, grad_clip=1e-3)


def run_round(alg, data, client_state):
    payload = alg.payload(alg.init_global(), 0)
    ctx2 = RoundContext(round=0, seed=0, train=RUN, generator=torch.Generator().manual_seed(0))
    update, kept = alg.client_update(payload, data, client_state, ctx2)
    return payload, update, kept


def run_optimizer_steps(tensors: dict, loss_of, steps: int) -> dict:
    """`steps` of torch.optim.SGD (RUN's momentum and weight decay) after clip_grad_norm_, on full batches."""
    leaves = [v.clone().requires_grad_(True) for v in tensors.values()]
    optimizer = torch.optim.SGD(leaves, lr=LR, momentum=RUN.momentum, weight_decay=RUN.weight_decay)
    for _ in range(steps):
        optimizer.zero_grad()
        loss_of(dict(zip(tensors, leaves))).backward()
        torch.nn.utils.clip_grad_norm_(leaves, RUN.grad_clip)
        optimizer.step()
    return {k: v.detach() for k, v in zip(tensors, leaves)}


@pytest.mark.parametrize("choice", ["plain_sgd", "run"])
def test_fedrod_personal_head_steps_by_plain_sgd_whatever_the_run_optimizer(choice):
    """FedNH's p_head_optimizer: SGD(lr) alone. Two full-batch passes: p ← p − lr·∇CE(φ_G(h) + φ_P(h)) twice, on the
    generic part as its own phase (momentum, weight decay, clipping) left it; `run`: torch's SGD after clipping."""
    alg, data = algorithm("fedrod", personal_optimizer=choice), client()
    start = alg.init_client(data)
    payload, update, kept = run_round(alg, data, start)
    with torch.no_grad():
        h, z = functional_call(alg.new_model(), {**update.tensors, **start["personal_head"]}, (data.x,),
                               {"return_features": True})

    def loss_of(p):
        return F.cross_entropy(z + h @ p["personal_head.weight"].T + p["personal_head.bias"], data.y)

    head = dict(start["personal_head"])
    if choice == "plain_sgd":
        for _ in range(2):
            leaves = {k: v.clone().requires_grad_(True) for k, v in head.items()}
            grads = torch.autograd.grad(loss_of(leaves), list(leaves.values()))
            head = {k: (v - LR * g).detach() for (k, v), g in zip(head.items(), grads)}
    else:
        head = run_optimizer_steps(head, loss_of, 2)
    for k, v in head.items():
        assert torch.allclose(kept["personal_head"][k], v, atol=1e-6), k


def test_fedrod_plain_sgd_personal_head_needs_a_phase_of_its_own():
    assert algorithm("fedrod").params.personal_optimizer == "plain_sgd"
    assert algorithm("fedrod", separate=False).params.personal_optimizer == "run"  # one optimizer, both heads
    with pytest.raises(ValueError, match="personal_optimizer plain_sgd needs separate: true"):
        algorithm("fedrod", separate=False, personal_optimizer="plain_sgd")


@pytest.mark.parametrize("choice", ["plain_sgd", "run"])
def test_ditto_personal_model_steps_by_plain_sgd_whatever_the_run_optimizer(choice):
    """FedNH's DittoOptimizer: v ← v − lr·(∇CE(v) + λ(v − w^t)), no momentum or weight decay; two full-batch passes.
    `run`: torch's SGD after clipping, on the same objective."""
    alg, data = algorithm("ditto", lam=0.5, personal_optimizer=choice), client()
    personal = {k: v + 0.1 for k, v in alg.init_global()["model"].items()}
    payload, update, kept = run_round(alg, data, {"personal": personal})
    model, anchor = alg.new_model(), payload["model"]

    def ce(p):
        return F.cross_entropy(functional_call(model, p, (data.x,)), data.y)

    v = dict(personal)
    if choice == "plain_sgd":
        for _ in range(2):
            leaves = {k: t.clone().requires_grad_(True) for k, t in v.items()}
            grads = torch.autograd.grad(ce(leaves), list(leaves.values()))
            v = {k: (t - LR * (g + 0.5 * (t - anchor[k]))).detach() for (k, t), g in zip(v.items(), grads)}
    else:
        v = run_optimizer_steps(v, lambda p: ce(p) + 0.25 * sum(((p[k] - anchor[k]) ** 2).sum() for k in p), 2)
    for k, t in v.items():
        assert torch.allclose(kept["personal"][k], t, atol=1e-6), k


# -------------------------------------------------------------------------------------------- CReFF
def test_match_distance_by_hand():
    real = [torch.tensor([[1.0, 0.0], [0.0, 2.0]]), torch.tensor([1.0, 1.0])]
    synthetic = [torch.tensor([[1.0, 1.0], [0.0, -3.0]]), torch.tensor([2.0, 2.0])]
    # rows: 1 − cos((1,0),(1,1)) = 1 − 1/√2; 1 − cos((0,2),(0,−3)) = 2; the bias as one row: 1 − 1 = 0
    assert match_distance(synthetic, real).item() == pytest.approx(1 - 1 / math.sqrt(2) + 2, abs=1e-5)


def test_class_gradient_of_a_linear_head_by_hand():
    head = {HEAD + "weight": torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], requires_grad=True)}
    h = torch.tensor([[1.0, 2.0], [0.0, 1.0]])
    err = (torch.softmax(h @ head[HEAD + "weight"].detach().T, dim=1) - F.one_hot(torch.tensor([1, 1]), 3)) / 2
    assert torch.allclose(head_gradient(head, h, 1)[0], err.T @ h, atol=1e-6)


def test_feature_synthesis_moves_only_the_classes_with_gradients_toward_them():
    torch.manual_seed(0)
    head = {HEAD + "weight": torch.randn(3, 4)}
    features = torch.randn(3 * 5, 4)
    target = torch.randn(5, 4) + 2.0
    real = {1: head_gradient({k: v.requires_grad_(True) for k, v in head.items()}, target, 1)}
    before = match_distance(head_gradient(head, features[5:10], 1), real[1]).item()
    out = synthesise_features(features, head, real, 5, steps=50, lr=0.5)
    after = match_distance(head_gradient(head, out[5:10], 1), real[1]).item()
    assert after < before
    assert torch.equal(out[:5], features[:5]) and torch.equal(out[10:], features[10:])
    same = synthesise_features(target.repeat(3, 1), head, {1: real[1]}, 5, steps=5, lr=0.5)
    assert torch.allclose(same[5:10], target, atol=1e-4)  # matched already: nothing to move


def test_retrained_classifier_is_seeded_and_fits_separable_features():
    features = torch.cat([torch.full((4, 2), 3.0) * torch.tensor([1.0, 0.0]), torch.full((4, 2), 3.0) * torch.tensor([0.0, 1.0])])
    like = {HEAD + "weight": torch.zeros(2, 2), HEAD + "bias": torch.zeros(2)}
    a = retrain_classifier(features, 4, like, 30, 0.5, 3, torch.Generator().manual_seed(1))
    b = retrain_classifier(features, 4, like, 30, 0.5, 3, torch.Generator().manual_seed(1))
    assert all(torch.equal(a[k], b[k]) for k in a) and set(a) == set(like)
    logits = features @ a[HEAD + "weight"].T + a[HEAD + "bias"]
    assert torch.equal(logits.argmax(dim=1), torch.tensor([0] * 4 + [1] * 4))


def test_class_gradients_are_averaged_over_the_clients_holding_the_class():
    from tasks.algorithms.base import ClientUpdate

    grads = [{HEAD + "weight": torch.tensor([[[1.0]], [[2.0]]])}, {HEAD + "weight": torch.tensor([[[3.0]], [[0.0]]])}]
    present = [torch.tensor([True, True]), torch.tensor([True, False])]
    updates = [ClientUpdate(i, 1, stats={"class_grads": g, "present": p}) for i, (g, p) in enumerate(zip(grads, present))]
    out = averaged_class_gradients(updates, [HEAD + "weight"])
    assert out[0][0].item() == 2.0 and out[1][0].item() == 2.0  # class 1: only the first client holds it


# ------------------------------------------------------------------ the personalized model (fednh.md §12.1)
@pytest.mark.parametrize("name", ["fednh", "fedavg_pm", "fedper", "fedrep", "ditto", "fedrod", "creff"])
def test_the_personalized_model_is_one_local_update_not_kept(name):
    alg, data = algorithm(name), client()
    server, payload, update, kept = round_of(alg, data)
    before = {k: v for k, v in kept.items()}
    evaluation_ctx = ctx(1)
    updated = alg.updated_state(payload, data, kept, evaluation_ctx)
    _, again = alg.client_update(payload, data, kept, final_update_context(evaluation_ctx, data.client_id))
    model_now = alg.final_objective(payload, data, kept, evaluation_ctx)
    assert set(updated) >= set(model_now.start)  # a whole model
    assert kept == before  # the evaluation keeps nothing
    for part, tensors in again.items():  # the update it evaluates is a round's update from the same state
        if isinstance(tensors, dict):
            for k, v in tensors.items():
                named = [u for u in updated if u == k or u.endswith("." + k)]  # Ditto's under its part's prefix
                key = next((u for u in named if u.startswith(part)), named[0])
                assert torch.allclose(updated[key], v, atol=1e-6), (part, k)
    alg.client_evaluate(payload, data, kept, evaluation_ctx)
    assert torch.equal(evaluation_ctx.generator.get_state(), ctx(1).generator.get_state())  # its draws untouched


def test_latest_evaluates_the_kept_model():
    alg, data = algorithm("fednh", personal_model="latest"), client()
    server, payload, update, kept = round_of(alg, data)
    latest = alg.client_evaluate(payload, data, kept, ctx(1))
    from tasks.algorithms.personal import personalized_accuracies

    assert latest == personalized_accuracies(alg.working_model(kept["model"], key="personal"), data)
    assert state_of(alg.working_model(kept["model"], key="x")).keys() == kept["model"].keys()
