"""FedSA's HtFLlib baselines (docs/methods/{lg_fedavg,fedgen,fml,fedkd,feddistill,fedtgp,fedgh}.md): what each
client sends and its size, and how each server folds it, against hand computations on tiny tensors."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tasks.algorithms import ALGORITHMS, ClientData, ClientUpdate, RoundContext, Setup, TrainSettings
from tasks.algorithms.feddistill import distillation_loss
from tasks.algorithms.fedgen import ensemble_logits
from tasks.algorithms.fedgh import train_head, uploaded_pairs
from tasks.algorithms.fedkd import compress, recover, svd_rank
from tasks.algorithms.fedtgp import adaptive_margin, margin_loss
from tasks.algorithms.fml import kl_mean

D, C = 16, 10
HEAD_BYTES = 4 * (D * C + C)


def make(name: str, **params):
    setup = Setup(num_classes=C, input_shape=(1, 8, 8), num_clients=4, model_name="fedsa_digits_1",
                  model_options={"feature_dim": D}, train=TrainSettings(batch_size=4, lr=0.01, rounds=10))
    cls = ALGORITHMS.get(name)
    return cls(cls.Params(**params), setup)


def client(cid: int) -> ClientData:
    g = torch.Generator().manual_seed(cid)
    x, y = torch.randn(12, 1, 8, 8, generator=g), torch.tensor([0, 3, 3, 7] * 3)
    return ClientData(cid, x, y, x[:4], y[:4], num_classes=C)


def one_round(algo, cid: int, round_idx: int = 0, state=None):
    """(the update client `cid` sends from the initial server state, its next state, the payload it got)."""
    state = algo.init_global() if state is None else state
    if algo.capabilities().setup_exchange:
        state = algo.server_setup(state, [algo.client_setup(client(c), torch.Generator()) for c in range(4)])
    payload = algo.payload(state, round_idx)
    data = client(cid)
    ctx = RoundContext(round=round_idx, seed=0, train=algo.setup.train, generator=torch.Generator().manual_seed(1))
    update, new_state = algo.client_update(payload, data, algo.init_client(data), ctx)
    assert math.isfinite(update.metrics["train_loss"])
    return update, new_state, payload, state


def head(weight: float, bias: float) -> dict:
    return {"classifier.weight": torch.full((C, D), weight), "classifier.bias": torch.full((C,), bias)}


# ------------------------------------------------------------------------------ LG-FedAvg, FedGen, FedGH
@pytest.mark.parametrize("name", ["lg_fedavg", "fedgen"])
def test_a_shared_head_is_sent_and_averaged_by_samples(name):
    algo = make(name)
    update, new_state, payload, state = one_round(algo, 3)  # the conv member: its extractor stays home
    assert set(update.tensors) == {"classifier.weight", "classifier.bias"} and update.stats == {}
    assert update.bytes_sent == HEAD_BYTES
    # the client trained from the global head (client 0's initial head), not its own
    assert torch.equal(algo.evaluated_state(payload, new_state)["classifier.weight"], payload["head"]["classifier.weight"])
    folded = algo.aggregate(state, [ClientUpdate(0, 1, tensors=head(1.0, 2.0)), ClientUpdate(1, 3, tensors=head(5.0, -2.0))], 0)
    assert torch.allclose(folded["head"]["classifier.weight"], torch.full((C, D), (1 * 1 + 3 * 5) / 4))
    assert torch.allclose(folded["head"]["classifier.bias"], torch.full((C,), (2 - 6) / 4))


def test_fedgen_draws_generator_labels_from_every_clients_counts_and_trains_its_generator():
    algo = make("fedgen", server_steps=3)
    _, _, payload, state = one_round(algo, 0)
    assert torch.equal(payload["label_counts"], torch.tensor([12.0, 0, 0, 24, 0, 0, 0, 12, 0, 0]))
    folded = algo.aggregate(state, [ClientUpdate(0, 1, tensors=head(0.1, 0.0))], 0)
    assert any(not torch.equal(folded["generator"][k], state["generator"][k]) for k in state["generator"])
    labels, _ = algo.draw(payload["label_counts"], torch.Generator().manual_seed(0))
    assert set(labels.tolist()) <= {0, 3, 7}


def test_fedgen_keeps_the_trained_generator_only_where_asked():
    """keep_generator: true sends the generator the server trained (train_generator's result) to the next round;
    false (HtFLlib's servergen.py, which never saves it) leaves the initial generator in place, head averaged alike."""
    updates = [ClientUpdate(0, 1, tensors=head(0.1, 0.0)), ClientUpdate(1, 3, tensors=head(0.3, 0.2))]
    kept, dropped = make("fedgen", server_steps=2), make("fedgen", server_steps=2, keep_generator=False)
    _, _, _, state = one_round(kept, 0)
    initial = {k: v.clone() for k, v in state["generator"].items()}
    new_kept, new_dropped = kept.aggregate(state, updates, 0), dropped.aggregate(state, updates, 0)
    trained = kept.train_generator(state, updates, 0)
    assert all(torch.equal(new_kept["generator"][k], trained[k]) for k in trained)
    assert any(not torch.equal(trained[k], initial[k]) for k in trained)
    assert all(torch.equal(new_dropped["generator"][k], initial[k]) for k in initial)
    for name, v in new_kept["head"].items():
        assert torch.equal(new_dropped["head"][name], v)
    assert torch.allclose(new_dropped["head"]["classifier.weight"], torch.full((C, D), (0.1 + 3 * 0.3) / 4))
    payload = dropped.payload(new_dropped, 1)
    assert all(torch.equal(payload["generator"][k], initial[k]) for k in initial)


def test_fedgen_trains_its_generator_against_the_sample_weighted_ensemble_of_heads():
    z = torch.tensor([[1.0, 2.0]])
    h1 = {"classifier.weight": torch.tensor([[1.0, 0.0], [0.0, 1.0]]), "classifier.bias": torch.tensor([0.0, 4.0])}
    h2 = {"classifier.weight": torch.tensor([[2.0, 2.0], [0.0, 0.0]]), "classifier.bias": torch.tensor([0.0, 0.0])}
    # (1/4)·(1, 2 + 4) + (3/4)·(6, 0)
    logits = ensemble_logits([ClientUpdate(0, 1, tensors=h1), ClientUpdate(1, 3, tensors=h2)], z)
    assert torch.allclose(logits, torch.tensor([[0.25 + 4.5, 1.5]]))
    algo = make("fedgen", server_steps=2)
    _, _, _, state = one_round(algo, 0)
    trained = algo.train_generator(state, [ClientUpdate(0, 1, tensors=head(0.2, 0.1))], 0)
    assert any(not torch.equal(trained[k], state["generator"][k]) for k in trained)


def test_fedgh_sends_prototypes_and_the_server_trains_the_head_on_them():
    algo = make("fedgh")
    update, new_state, _, _ = one_round(algo, 2)
    assert update.tensors == {} and update.stats["protos"].shape == (3, D)
    assert update.bytes_sent == 4 * (3 * D + C)
    protos, labels = uploaded_pairs([update, ClientUpdate(1, 1, stats={"protos": torch.ones(1, D),
                                                                       "counts": F.one_hot(torch.tensor(5), C).float()})])
    assert labels.tolist() == [0, 3, 7, 5] and torch.equal(protos[3], torch.ones(D))
    # one pair, one SGD step by hand: W ← W − lr·(softmax(Wp + b) − e_y)pᵀ, b ← b − lr·(softmax(Wp + b) − e_y)
    p, y, lr = torch.tensor([[1.0] + [0.0] * (D - 1)]), torch.tensor([2]), 0.5
    start = head(0.0, 0.0)
    trained = train_head(start, p, y, lr, 1, 4, torch.Generator().manual_seed(0))
    grad = torch.full((C,), 0.1) - F.one_hot(y[0], C)
    assert torch.allclose(trained["classifier.bias"], -lr * grad)
    assert torch.allclose(trained["classifier.weight"][:, 0], -lr * grad)
    assert torch.equal(trained["classifier.weight"][:, 1:], torch.zeros(C, D - 1))


# ------------------------------------------------------------------------------------------- FedTGP
def test_fedtgp_margin_and_loss_by_hand():
    means = torch.tensor([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0], [9.0, 9.0]])
    present = torch.tensor([True, True, True, False])
    # nearest other present class: 0 → 1 (class 2), 1 → √(9 + 9) (class 2), 2 → 1; the largest is √18
    assert adaptive_margin(means, present, 100.0) == pytest.approx(math.sqrt(18))
    assert adaptive_margin(means, present, 2.0) == 2.0
    assert adaptive_margin(means, torch.tensor([True, False, False, False]), 7.0) == 7.0
    generated = torch.tensor([[0.0, 0.0], [3.0, 4.0]])
    loss = margin_loss(generated, torch.tensor([[0.0, 0.0]]), torch.tensor([0]), 1.0)
    # distances (0, 5), the true class's plus 1: CE([−1, −5], 0)
    assert float(loss) == pytest.approx(1 + math.log(math.exp(-1) + math.exp(-5)), rel=1e-5)


def test_fedtgp_sends_prototypes_and_the_server_replaces_them_by_generated_ones():
    algo = make("fedtgp", server_epochs=2)
    update, _, _, state = one_round(algo, 1)
    assert update.tensors == {} and update.bytes_sent == 4 * (3 * D + C)
    folded = algo.aggregate(state, [update], 0)
    assert folded["proto_mask"].all() and folded["protos"].shape == (C, D)
    assert float(folded["margin"]) == pytest.approx(adaptive_margin(*_spread(update), 100.0), rel=1e-6)
    assert any(not torch.equal(folded["tgp"][k], state["tgp"][k]) for k in state["tgp"])


def _spread(update):
    rows = torch.zeros(C, D)
    rows[update.stats["counts"] > 0] = update.stats["protos"]
    return rows, update.stats["counts"] > 0


# ---------------------------------------------------------------------------------------- FedDistill
def test_feddistill_loss_by_hand():
    logits = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    y = torch.tensor([0, 1])
    global_logits, mask = torch.tensor([[2.0, 0.0], [0.0, 0.0]]), torch.tensor([True, False])
    log_p = logits.log_softmax(dim=1)
    t0 = torch.tensor([2.0, 0.0]).softmax(0)
    t1 = logits[1].softmax(0)  # class 1 has no global logits: the sample's own
    expected = -((t0 * log_p[0]).sum() + (t1 * log_p[1]).sum()) / 2
    assert torch.isclose(distillation_loss(logits, y, global_logits, mask, True), expected)
    raw = -((torch.tensor([2.0, 0.0]) * log_p[0]).sum() + (logits[1] * log_p[1]).sum()) / 2
    assert torch.isclose(distillation_loss(logits, y, global_logits, mask, False), raw)


def test_feddistill_sends_class_logits_and_the_server_averages_them_per_class():
    algo = make("feddistill")
    update, _, payload, state = one_round(algo, 0)
    assert set(payload) == {"logits", "logit_mask"} and update.tensors == {}
    assert update.stats["logits"].shape == (3, C) and update.bytes_sent == 4 * (3 * C + C)
    other = ClientUpdate(1, 5, stats={"logits": torch.ones(1, C), "counts": F.one_hot(torch.tensor(3), C).float()})
    folded = algo.aggregate(state, [update, other], 0)
    assert folded["logit_mask"].tolist() == [i in (0, 3, 7) for i in range(C)]
    assert torch.allclose(folded["logits"][3], (update.stats["logits"][1] + 1) / 2)  # unweighted: 12 vs 5 samples
    assert torch.allclose(folded["logits"][7], update.stats["logits"][2])


# ----------------------------------------------------------------------------------------- FML, FedKD
def test_kl_is_averaged_over_batch_and_classes():
    z, t = torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 0.0]])
    p, q = t.softmax(1)[0], z.softmax(1)[0]
    assert torch.isclose(kl_mean(z, t), (p * (p.log() - q.log())).sum() / 2)


def test_fml_sends_the_shared_model_and_the_server_averages_it_unweighted():
    algo = make("fml")
    update, new_state, payload, state = one_round(algo, 3)
    shared_params = set(algo.shared_parameters(payload["model"]))
    assert set(update.tensors) == shared_params  # client 0's architecture, not the client's own conv model
    assert update.bytes_sent == sum(4 * payload["model"][k].numel() for k in shared_params)
    assert new_state["model"].keys() == algo.init_client(client(3))["model"].keys()
    a = {k: torch.ones_like(v) for k, v in update.tensors.items()}
    b = {k: 3 * torch.ones_like(v) for k, v in update.tensors.items()}
    folded = algo.aggregate(state, [ClientUpdate(0, 1, tensors=a), ClientUpdate(1, 100, tensors=b)], 0)
    assert all(torch.allclose(folded["model"][k], torch.full_like(v, 2.0)) for k, v in a.items())


def test_svd_rank_and_compression_by_hand():
    s = torch.tensor([3.0, 2.0, 1.0])  # squares 9, 4, 1 of 14
    assert svd_rank(s, 0.5) == 1  # 9 > 7
    assert svd_rank(s, 0.9) == 2  # 13 > 12.6
    assert svd_rank(s, 0.95) == 3  # no shorter prefix exceeds 13.3: all of them (HtFLlib would keep none)
    w = torch.diag(s)
    kept = compress({"w": w, "b": torch.ones(3), "row": torch.ones(1, 3)}, 0.9)
    assert kept["w"]["s"].tolist() == [3.0, 2.0] and kept["w"]["u"].shape == (3, 2) and kept["w"]["v"].shape == (2, 3)
    assert torch.equal(kept["b"], torch.ones(3)) and torch.equal(kept["row"], torch.ones(1, 3))
    assert torch.allclose(recover(kept)["w"], torch.diag(torch.tensor([3.0, 2.0, 0.0])), atol=1e-6)
    conv = torch.randn(4, 2, 3, 3, generator=torch.Generator().manual_seed(0))
    full = compress({"c": conv}, 0.999999)
    assert full["c"]["u"].shape == (4, 2, 3, 3) and torch.allclose(recover(full)["c"], conv, atol=1e-5)


def test_fedkd_sends_its_mentee_compressed_and_counts_the_compressed_size():
    algo = make("fedkd", energy_start=0.5, energy_end=0.6)
    update, new_state, payload, state = one_round(algo, 2)
    assert payload == {"factors": {}} and set(new_state) == {"model", "mentee", "w_h"}
    factored = {k: v for k, v in update.tensors.items() if isinstance(v, dict)}
    assert factored and all(v["s"].numel() < min(v["u"].shape[-2], v["v"].shape[-1]) for v in factored.values())
    assert update.bytes_sent == sum(4 * t.numel() for v in update.tensors.values()
                                    for t in (v.values() if isinstance(v, dict) else [v]))
    assert algo.energy(0) == 0.5 and algo.energy(5) == pytest.approx(0.55)
    folded = algo.aggregate(state, [update, update], 0)  # the mean of two equal uploads, compressed again at e_0
    again = recover(compress(recover(update.tensors), 0.5))
    assert all(torch.allclose(recover(folded["factors"])[k], v, atol=1e-5) for k, v in again.items())
