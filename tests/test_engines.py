"""The two engines: the vectorized one trains every client to the sequential one's result (within float32 tolerance),
its building blocks match torch's by hand, and `auto` falls back where vectorising is refused."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from orchestrator.clients.client_calls import CallKind, ClientCall, ClientResults
from orchestrator.clients.client_host import ClientHost
from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.experiment.methods import build_algorithm
from orchestrator.server.engine_check import ADAM_ATOL, RTOL, SGD_ATOL
from orchestrator.server.federation import Server, run_in_process
from tasks.algorithms import ALGORITHMS
from tasks.algorithms.base import batch_mean, cross_entropy
from tasks.algorithms.engines import (
    SMALL_MODEL_MACS,
    StackedOptimizer,
    choose_engine,
    clip_per_client,
    forward_macs,
    model_refusal,
)

# every registered method, so a new one is checked on both engines without being listed here: at its defaults,
# each trains vectorised unless its class states why it cannot
VECTORIZED = [name for name in ALGORITHMS.names() if ALGORITHMS.get(name).capabilities().vectorizable]
FALLBACK = [name for name in ALGORITHMS.names() if name not in VECTORIZED]


def tiny(tmp_path, *overrides: str):
    """6 clients of uneven sizes, batch 8, 2 epochs: short last batches and uneven step counts."""
    return load_config("configs/default.yaml", [
        "data.num_clients=6", "data.partition.min_size=3", "train.batch_size=8", "train.local_epochs=2",
        "train.optimizer.momentum=0.9", "train.optimizer.weight_decay=0.001", "train.grad_clip=1.0",
        "algorithm.fedfm.warmup_rounds=0", "algorithm.fedfm_lite.warmup_rounds=0", "algorithm.fedfm_lite.period=2",
        "algorithm.fedavg_periodic.period=2", "algorithm.fedrep.head_epochs=2", "algorithm.creff.match_steps=3",
        "algorithm.creff.retrain_epochs=2", f"data.partitions_dir={tmp_path}", *overrides])


def assert_close(a, b, atol: float, where: str) -> None:
    if isinstance(a, dict):
        assert set(a) == set(b), where
        for k in a:
            assert_close(a[k], b[k], atol, f"{where}.{k}")
    elif isinstance(a, torch.Tensor):
        assert a.shape == b.shape and a.dtype == b.dtype, where
        assert torch.allclose(a.double(), b.double(), atol=atol, rtol=RTOL), (where, float((a - b).abs().max()))
    else:
        assert a == pytest.approx(b, abs=atol, rel=RTOL), where


def trained(host: ClientHost, payload, cids: list[int], round_idx: int, summed: bool = False) -> ClientResults:
    """The clients' updates on `host`, as in one process (an error raises)."""
    return host.call(ClientCall(CallKind.UPDATE, payload, cids, round_idx, summed))


def engines_after_rounds(tmp_path, *overrides: str, rounds: int = 2):
    """Both engines' updates and client states over `rounds` rounds, from the same server state each round."""
    cfg = tiny(tmp_path, *overrides)
    data = prepare_data(cfg)
    cids = list(range(data.num_clients))
    hosts = {e: ClientHost(tiny(tmp_path, *overrides, f"train.engine={e}"), data, cids)
             for e in ("sequential", "vectorized")}
    assert hosts["vectorized"].engine == "vectorized"
    server = Server(cfg, data)
    out = []
    for t in range(rounds):
        payload = server.algorithm.payload(server.state, t)
        updates = {e: trained(h, payload, cids, t).results for e, h in hosts.items()}
        out.append((updates, {e: h.client_states() for e, h in hosts.items()}))
        server.state = server.algorithm.aggregate(server.state, [updates["sequential"][c] for c in cids], t)
    return data, out


@pytest.mark.parametrize("name", VECTORIZED)
def test_vectorized_equals_sequential_per_client(tmp_path, name):
    data, rounds = engines_after_rounds(tmp_path, f"algorithm.name={name}")
    sizes = data.train_sizes()
    steps = [-(-n // 8) for n in sizes]
    assert any(n % 8 for n in sizes) and len(set(steps)) > 1  # short last batches, uneven step counts
    for t, (updates, states) in enumerate(rounds):
        for cid in range(data.num_clients):
            seq, vec = updates["sequential"][cid], updates["vectorized"][cid]
            where = f"{name} round {t} client {cid}"
            assert_close(seq.tensors, vec.tensors, SGD_ATOL, where + " tensors")
            assert_close(seq.stats, vec.stats, SGD_ATOL, where + " stats")
            for metric in set(seq.metrics) - {"seconds"}:
                assert_close(seq.metrics[metric], vec.metrics[metric], SGD_ATOL, f"{where} {metric}")
        assert_close(states["sequential"], states["vectorized"], SGD_ATOL, f"{name} round {t} client states")


def test_vectorized_adam_equals_sequential(tmp_path):
    _, rounds = engines_after_rounds(tmp_path, "algorithm.name=fedprox", "train.optimizer.name=adam",
                                     "train.optimizer.lr=0.01", rounds=1)
    updates = rounds[0][0]
    for cid in updates["sequential"]:
        assert_close(updates["sequential"][cid].tensors, updates["vectorized"][cid].tensors, ADAM_ATOL, f"client {cid}")


def test_vectorized_local_steps_equal_sequential(tmp_path):
    _, rounds = engines_after_rounds(tmp_path, "algorithm.name=fedavg", "train.local_steps=3",
                                     "train.batch_size=32", rounds=1)
    updates = rounds[0][0]
    for cid in updates["sequential"]:
        assert_close(updates["sequential"][cid].tensors, updates["vectorized"][cid].tensors, SGD_ATOL, f"client {cid}")


def test_a_clients_result_depends_on_who_trains_with_it_only_in_the_last_bits(tmp_path):
    """Why a round's clients train in groups fixed by the config, not by the actors (orchestrator/clients/client_groups.py):
    the same clients in the same batch repeat bitwise; in another batch of clients, only within tolerance."""
    cfg = tiny(tmp_path, "algorithm.name=fedprox", "train.engine=vectorized")
    data = prepare_data(cfg)
    payload = Server(cfg, data).algorithm.payload(Server(cfg, data).state, 0)
    together = trained(ClientHost(cfg, data, list(range(6))), payload, list(range(6)), 0).results
    for group in ([0, 2, 4], [1, 3, 5], [5]):
        apart = trained(ClientHost(cfg, data, group), payload, group, 0).results
        for cid in group:
            assert_close(together[cid].tensors, apart[cid].tensors, SGD_ATOL, f"client {cid} in {group}")
    again = trained(ClientHost(cfg, data, list(range(6))), payload, list(range(6)), 0).results
    for cid in range(6):
        for key, value in together[cid].tensors.items():
            assert torch.equal(value, again[cid].tensors[key]), (cid, key)


def test_default_config_runs_agree_and_repeat(tmp_path):
    """The default config (FedAvg, 10 clients, 20 rounds): the vectorized run lands within 0.5 accuracy points of
    the sequential one, and repeats bitwise."""
    base = load_config("configs/default.yaml", [f"data.partitions_dir={tmp_path}"])
    data = prepare_data(base)
    runs = {e: run_in_process(load_config("configs/default.yaml", [f"data.partitions_dir={tmp_path}",
                                                                   f"train.engine={e}"]), data)
            for e in ("sequential", "vectorized")}
    assert abs(runs["sequential"][-1]["accuracy"] - runs["vectorized"][-1]["accuracy"]) <= 0.005
    again = run_in_process(load_config("configs/default.yaml", [f"data.partitions_dir={tmp_path}",
                                                                "train.engine=vectorized"]), data)
    assert again == runs["vectorized"]


# ------------------------------------------------------------------------------------- the choice
@pytest.mark.parametrize("name", VECTORIZED + FALLBACK)
def test_auto_vectorizes_where_it_can(tmp_path, name):
    cfg = tiny(tmp_path, f"algorithm.name={name}")
    data = prepare_data(cfg)
    algorithm = build_algorithm(cfg, data.num_classes, data.input_shape)
    expected = "vectorized" if name in VECTORIZED else "sequential"
    assert choose_engine("auto", algorithm) == expected
    assert choose_engine("sequential", algorithm) == "sequential"
    if name in FALLBACK:
        with pytest.raises(ValueError, match=f"train.engine: vectorized cannot train {name}: .+; use train.engine"):
            choose_engine("vectorized", algorithm)


def test_forward_macs_by_hand():
    """Linear 3→4 (12) and ReLU (none), then a 2→1-channel 3×3 convolution over a 4×4 input, padding 1
    (16 outputs × 2 channels × 9 taps = 288)."""
    assert forward_macs(nn.Sequential(nn.Linear(3, 4), nn.ReLU()), (3,)) == 12
    assert forward_macs(nn.Conv2d(2, 1, 3, padding=1, bias=False), (2, 4, 4)) == 288


@pytest.mark.parametrize(("cell", "gates"), [(nn.LSTM, 4), (nn.GRU, 3), (nn.RNN, 1)])
def test_recurrent_macs_by_hand(cell, gates):
    """Two layers of 5 units over 4 steps of 3 inputs: at each step, each gate multiplies the input (3, then the
    first layer's 5) and the hidden state (5) by its weights: 4 × gates × 5 × ((3 + 5) + (5 + 5)); a second
    direction doubles it, the second layer's input then 10."""
    assert forward_macs(cell(3, 5, num_layers=2, batch_first=True), (4, 3)) == 4 * gates * 5 * (8 + 10)
    assert (forward_macs(cell(3, 5, num_layers=2, batch_first=True, bidirectional=True), (4, 3))
            == 2 * 4 * gates * 5 * (8 + 15))


@pytest.mark.parametrize(("config", "model", "input_shape", "why"), [
    ("configs/shakespeare.yaml", ["model.cell=lstm"], (40,), "is recurrent"),
    ("configs/default.yaml", ["model.name=acar_cnn", "model.hidden=384", "model.feature_dim=192"], (1, 28, 28),
     "multiply-adds a sample"),
])
def test_auto_keeps_measured_slower_models_sequential_on_cpu(tmp_path, config, model, input_shape, why):
    """The character RNN and the CNN, measured slower vectorised on CPUs, stay sequential under `auto` there and
    vectorise where the clients have GPUs; `vectorized` asked for explicitly still runs; the digits MLP vectorises."""
    from tasks.algorithms.engines import auto_prefers_sequential, large_model

    cfg = load_config(config, [*model, f"data.partitions_dir={tmp_path}"])
    algorithm = build_algorithm(cfg, 80 if len(input_shape) == 1 else 10, input_shape)
    assert why in auto_prefers_sequential(algorithm)
    assert "multiply-adds a sample" in large_model(algorithm)  # both: client groups of a few steps
    assert choose_engine("auto", algorithm) == "sequential"
    assert choose_engine("auto", algorithm, clients_on_gpu=True) == "vectorized"
    assert choose_engine("vectorized", algorithm) == "vectorized"
    mlp = build_algorithm(tiny(tmp_path), 10, (64,))
    assert forward_macs(mlp.working_model(), (64,)) < SMALL_MODEL_MACS and large_model(mlp) == ""
    assert choose_engine("auto", mlp) == "vectorized"


def test_batchnorm_and_dropout_are_refused():
    assert "BatchNorm" in model_refusal(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)))
    assert "dropout" in model_refusal(nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5)))
    assert model_refusal(nn.Sequential(nn.Linear(2, 2), nn.GroupNorm(1, 2))) == ""


# ------------------------------------------------------------------------------ by hand, tiny tensors
def test_masked_batch_mean_and_cross_entropy_by_hand():
    values = torch.tensor([1.0, 3.0, 100.0])
    weight = torch.tensor([1.0, 1.0, 0.0])
    assert float(batch_mean(values, weight)) == 2.0
    assert float(batch_mean(values, None)) == pytest.approx(104 / 3)
    logits = torch.tensor([[0.0, 0.0], [2.0, 0.0], [9.0, -9.0]])
    y = torch.tensor([0, 1, 1])
    # −log(1/2) and −log(1/(1+e²)), averaged; the padded third row is left out
    expected = (torch.log(torch.tensor(2.0)) + torch.log1p(torch.exp(torch.tensor(2.0)))) / 2
    assert torch.isclose(cross_entropy(logits, y, weight), expected)
    assert torch.isclose(cross_entropy(logits[:2], y[:2]), expected)


def test_per_client_clipping_matches_clip_grad_norm():
    grads = {"w": torch.tensor([[3.0, 4.0], [0.3, 0.4]]), "b": torch.tensor([[0.0], [0.0]])}
    clipped = clip_per_client(grads, 1.0)
    # client 0: ‖g‖ = 5 → scaled by 1/(5 + 1e-6); client 1: ‖g‖ = 0.5 < 1 → unchanged
    assert torch.allclose(clipped["w"][0], torch.tensor([0.6, 0.8]), atol=1e-6)
    assert torch.equal(clipped["w"][1], grads["w"][1])
    reference = nn.Parameter(torch.zeros(2))
    reference.grad = torch.tensor([3.0, 4.0])
    nn.utils.clip_grad_norm_([reference], 1.0)
    assert torch.allclose(clipped["w"][0], reference.grad)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_stacked_optimizer_matches_torch_and_masks_inactive_clients(optimizer):
    from tasks.algorithms.base import TrainSettings

    train = TrainSettings(optimizer=optimizer, lr=0.1, momentum=0.9, weight_decay=0.01)
    start = torch.tensor([[1.0, -2.0], [0.5, 0.5]])
    grads = [torch.tensor([[0.3, -0.1], [1.0, 1.0]]), torch.tensor([[-0.2, 0.4], [1.0, 1.0]])]
    stacked = {"w": start.clone()}
    opt = StackedOptimizer(stacked, train, train.lr)
    opt.step({"w": grads[0]}, torch.tensor([1.0, 1.0]))
    opt.step({"w": grads[1]}, torch.tensor([1.0, 0.0]))  # client 1 has run out of steps
    reference = nn.Parameter(start[0].clone())
    torch_opt = (torch.optim.Adam([reference], lr=0.1, weight_decay=0.01) if optimizer == "adam"
                 else torch.optim.SGD([reference], lr=0.1, momentum=0.9, weight_decay=0.01))
    for g in grads:
        reference.grad = g[0].clone()
        torch_opt.step()
    assert torch.allclose(stacked["w"][0], reference.detach(), atol=1e-6)
    once = nn.Parameter(start[1].clone())
    torch_once = (torch.optim.Adam([once], lr=0.1, weight_decay=0.01) if optimizer == "adam"
                  else torch.optim.SGD([once], lr=0.1, momentum=0.9, weight_decay=0.01))
    once.grad = grads[0][1].clone()
    torch_once.step()
    assert torch.allclose(stacked["w"][1], once.detach(), atol=1e-6)


def test_a_client_the_host_cannot_train_stops_its_vectorized_call_not_left_out(tmp_path):
    """A host fails no client alone (issue #36): only a lost actor leaves its clients out (orchestrator/ray_runtime/client_pool.py)."""
    cfg = tiny(tmp_path, "algorithm.name=local", "train.engine=vectorized")
    data = prepare_data(cfg)
    host = ClientHost(cfg, data, [0, 2])
    with pytest.raises(KeyError, match="client 1 is not hosted here and local keeps client state"):
        host.call(ClientCall(CallKind.UPDATE, {}, [0, 1, 2], 0))  # client 1 lives elsewhere


def test_fedsa_on_class_means_stays_sequential(tmp_path):
    cfg = tiny(tmp_path, "algorithm.name=fedsa", "algorithm.fedsa.per_sample=false")
    data = prepare_data(cfg)
    algorithm = build_algorithm(cfg, data.num_classes, data.input_shape)
    assert choose_engine("auto", algorithm) == "sequential"
    with pytest.raises(ValueError, match="vectorized cannot train fedsa: per_sample: false"):
        choose_engine("vectorized", algorithm)


def test_stacked_batches_pad_to_the_longest_real_batch_by_hand(tmp_path):
    """Two clients of 3 and 1 samples, batch 2, 1 epoch: client 0 takes batches of 2 then 1, client 1 one of 1;
    B = 2, S = 2; padding repeats the client's first sample with weight 0; client 1 is inactive at step 2."""
    from tasks.algorithms.base import ClientData, RoundContext, batch_indices, seeded_generator
    from tasks.algorithms.engines import ClientRound, round_batches, stacked_batches

    train = tiny(tmp_path, "train.batch_size=2", "train.local_epochs=1")
    settings = ClientHost(train, prepare_data(train), [0]).train
    clients = [ClientData(0, torch.tensor([[10.0], [11.0], [12.0]]), torch.tensor([0, 1, 2]), torch.zeros(0, 1),
                          torch.zeros(0, dtype=torch.long), 3),
               ClientData(1, torch.tensor([[20.0]]), torch.tensor([5]), torch.zeros(0, 1),
                          torch.zeros(0, dtype=torch.long), 6)]
    rounds = [ClientRound(d, RoundContext(0, 0, settings, seeded_generator(7, d.client_id)), None) for d in clients]
    x, y, weight, active, steps = stacked_batches(rounds, round_batches(rounds, settings), "cpu")
    order = batch_indices(3, settings, seeded_generator(7, 0))  # client 0's own draw: [2 samples], [1 sample]
    assert x.shape == (2, 2, 2, 1) and torch.equal(steps, torch.tensor([2.0, 1.0], dtype=torch.float64))
    assert torch.equal(x[0, 0, :, 0], 10.0 + order[0].float()) and torch.equal(x[1, 0, 0, 0:1], 10.0 + order[1].float())
    assert torch.equal(weight, torch.tensor([[[1.0, 1.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 0.0]]]))
    assert torch.equal(active, torch.tensor([[1.0, 1.0], [1.0, 0.0]]))
    assert x[1, 0, 1, 0] == 10.0 and x[1, 1, 0, 0] == 20.0 and torch.equal(y[0, 1], torch.tensor([5, 5]))


ONE_STEP = ["train.grad_clip=null", "train.local_epochs=1", "train.batch_size=1024"]  # every client one step
MIXED = ["train.grad_clip=null", "train.local_epochs=1", "train.batch_size=200"]  # some one step, some two


@pytest.mark.parametrize("steps, one_step", [([], 0), (ONE_STEP, 6), (MIXED, 4)],
                         ids=["clipped, 2 epochs", "one step each", "mixed"])
@pytest.mark.parametrize("name", ["fedavg", "fedprox"])
def test_a_partial_sum_taken_from_the_stacked_models_equals_summing_the_updates(tmp_path, name, steps, one_step):
    """resources.partial_sums on the vectorized engine sums the stacked trained models directly (no per-client
    copies), in one float32 product per tensor, and folds clients that all take one SGD step without training them
    apart (engines.fold_one_step; momentum and weight decay on); either equals `sum_updates`' float64 sum of the same
    round's per-client updates to float32 rounding, and each client's loss its own."""
    from orchestrator.clients.partial_sums import sum_updates

    cfg = tiny(tmp_path, f"algorithm.name={name}", "train.engine=vectorized", "resources.partial_sums=true", *steps)
    data = prepare_data(cfg)
    cids = list(range(data.num_clients))
    assert sum(n <= cfg.train.batch_size for n in data.train_sizes()) == one_step  # 6: folded
    payload = Server(cfg, data).algorithm.payload(Server(cfg, data).state, 0)
    direct = trained(ClientHost(cfg, data, cids), payload, cids, 0, summed=True)
    reference, (want,) = sum_updates(trained(ClientHost(cfg, data, cids), payload, cids, 0).results)
    (got,), direct = direct.partial_sums, direct.results
    assert (got.first_client, got.weight, got.bytes_sent) == (want.first_client, want.weight, want.bytes_sent)
    assert set(got.sums) == set(want.sums) and set(got.buffers) == set(want.buffers)
    for key in want.sums:
        assert got.sums[key].dtype == torch.float64
        scale = float(want.sums[key].abs().max())
        assert torch.allclose(got.sums[key], want.sums[key], rtol=1e-6, atol=1e-6 * scale), key
    assert sorted(direct) == sorted(reference) == cids
    for cid in cids:
        assert direct[cid].tensors == {} and direct[cid].num_samples == reference[cid].num_samples
        assert direct[cid].metrics["train_loss"] == pytest.approx(reference[cid].metrics["train_loss"], rel=1e-6)


def test_derive_seed_and_derive_seeds_are_numpy_s_seed_sequence_bit_for_bit():
    """Both work SeedSequence's mixing out themselves (Python integers; rows side by side as lanes of one integer,
    or as arrays beyond PACKED_ROWS rows): each must give SeedSequence(parts)'s first uint64 word, halved, for
    every number of parts and rows, words near 2**32 included (where a lane's products are largest)."""
    import numpy as np

    from tasks.algorithms.base import derive_seed, derive_seeds

    def reference(row) -> int:
        words = [int(p) & 0xFFFFFFFF for p in row]
        return int(np.random.SeedSequence(words).generate_state(2, np.uint64)[0] >> 1)

    rng = np.random.default_rng(0)
    for parts in (1, 2, 3, 4, 5, 6, 9, 16):
        for count in (1, 3, 17, 64, 65, 200):  # lanes up to 64 rows, arrays above
            rows = rng.integers(-2**40, 2**40, size=(count, parts))  # only the low 32 bits count
            rows[0], rows[-1] = 0, 2**32 - 1
            want = [reference(row) for row in rows.tolist()]
            assert derive_seeds(rows) == want, (parts, count)
            assert [derive_seed(*row) for row in rows.tolist()] == want
    assert derive_seed(*range(20)) == reference(range(20))  # more parts than the hash constants cover
    # a trailing 0 changes nothing up to four parts (ClientHost.round_seeds relies on it)
    rows = rng.integers(0, 2**32, size=(20, 3))
    assert derive_seeds(np.column_stack([rows, np.zeros(20, dtype=np.int64)])) == \
        [derive_seed(*row) for row in rows.tolist()]


def test_stacked_sgd_with_every_client_stepping_matches_torch_over_steps():
    """The all-active SGD path (multi-tensor operations): momentum and weight decay over three steps, two
    tensors, each client as torch.optim.SGD would train it alone."""
    from tasks.algorithms.base import TrainSettings

    train = TrainSettings(optimizer="sgd", lr=0.1, momentum=0.9, weight_decay=0.01)
    torch.manual_seed(0)
    start = {"w": torch.randn(3, 2, 2), "b": torch.randn(3, 2)}
    grads = [{"w": torch.randn(3, 2, 2), "b": torch.randn(3, 2)} for _ in range(3)]
    stacked = {n: t.clone() for n, t in start.items()}
    opt = StackedOptimizer(stacked, train, train.lr)
    for g in grads:
        opt.step(g, torch.ones(3), everyone=True)
    for k in range(3):
        reference = {n: nn.Parameter(t[k].clone()) for n, t in start.items()}
        torch_opt = torch.optim.SGD(reference.values(), lr=0.1, momentum=0.9, weight_decay=0.01)
        for g in grads:
            for n, p in reference.items():
                p.grad = g[n][k].clone()
            torch_opt.step()
        for n, p in reference.items():
            assert torch.allclose(stacked[n][k], p.detach(), atol=1e-6, rtol=0), (k, n)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("alone_up_to", [0, 1, 3, 6])
def test_steps_of_few_clients_taken_one_by_one_equal_sequential(tmp_path, monkeypatch, optimizer, alone_up_to):
    """The vectorized engine steps a prefix of at most ALONE_UP_TO clients one client at a time, without vmap: never
    (0), in the tail of uneven step counts (1, 3), or always (6 clients). Each gives every client's sequential update,
    with momentum, weight decay and clipping, or Adam."""
    from tasks.algorithms import engines

    monkeypatch.setattr(engines, "ALONE_UP_TO", alone_up_to)
    lr = "0.01" if optimizer == "adam" else "0.05"
    _, rounds = engines_after_rounds(tmp_path, "algorithm.name=fedprox", f"train.optimizer.name={optimizer}",
                                     f"train.optimizer.lr={lr}", rounds=2)
    for t, (updates, _) in enumerate(rounds):
        for cid in updates["sequential"]:
            assert_close(updates["sequential"][cid].tensors, updates["vectorized"][cid].tensors,
                         ADAM_ATOL if optimizer == "adam" else SGD_ATOL, f"round {t} client {cid}")
            assert updates["sequential"][cid].metrics["train_loss"] == pytest.approx(
                updates["vectorized"][cid].metrics["train_loss"], rel=1e-5)
