"""The vectorized engine's routes around vmap (tasks/algorithms/stacked.py): the MLP's stacked forward and the
per-row cross-entropy equal what vmap computes and a hand computation, and each is taken only where it computes
the model's and the method's own function."""
from __future__ import annotations

import math

import pytest
import torch
from torch.func import functional_call, vmap

from orchestrator.experiment.config import load_config
from orchestrator.experiment.methods import build_algorithm
from tasks.algorithms.stacked import ClientLosses, keeps_base_loss, stacked_cross_entropy
from tasks.models.base import build_model
from tasks.models.digits import MLP, MLPParams

K, B = 3, 4


def test_stacked_cross_entropy_is_each_rows_mean_over_its_real_samples_by_hand():
    logits = torch.tensor([[[2.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [3.0, 0.0]]])  # [K=2, B=2, C=2]
    y = torch.tensor([[0, 1], [1, 0]])
    weight = torch.tensor([[1.0, 1.0], [1.0, 0.0]])  # the second client's second sample is padding

    def nll(row, label):
        return -(row[label] - math.log(sum(math.exp(v) for v in row)))

    expected = [(nll([2.0, 0.0], 0) + nll([0.0, 1.0], 1)) / 2, nll([1.0, 1.0], 1)]
    assert stacked_cross_entropy(logits, y, weight).tolist() == pytest.approx(expected, abs=1e-6)


def mlp(**options) -> MLP:
    torch.manual_seed(0)
    return build_model("mlp", (6,), 3, {"hidden": [5], "feature_dim": 4, **options})


def stacked_params(model, k: int = K) -> dict[str, torch.Tensor]:
    """k different copies of the model's tensors, stacked."""
    torch.manual_seed(1)
    return {n: t.detach().unsqueeze(0) + 0.1 * torch.randn(k, *t.shape) for n, t in model.state_dict().items()}


@pytest.mark.parametrize("options", [{}, {"final_relu": False, "classifier_bias": False}])
def test_the_mlps_stacked_forward_is_each_clients_own_forward(options):
    model, x = mlp(**options), torch.randn(K, B, 6)
    params = stacked_params(model)
    h, logits = model.stacked_forward(params, x)
    for k in range(K):
        h_k, logits_k = functional_call(model, {n: p[k] for n, p in params.items()}, (x[k],), {"return_features": True})
        assert torch.allclose(h[k], h_k, atol=1e-6) and torch.allclose(logits[k], logits_k, atol=1e-6)


def test_only_a_model_that_computes_the_mlps_forward_stacks_it():
    class Rescaled(MLP):
        def features(self, x):
            return 2 * super().features(x)

    assert mlp().can_stack_forward()
    assert not Rescaled((6,), 3, MLPParams(hidden=[5], feature_dim=4)).can_stack_forward()
    assert not build_model("digits_cnn", (8, 8), 10, {}).can_stack_forward()


def algorithm(tmp_path, name: str):
    cfg = load_config("configs/default.yaml", [f"algorithm.name={name}", f"data.partitions_dir={tmp_path}",
                                               "model.hidden=[5]", "model.feature_dim=4"])
    return build_algorithm(cfg, 3, (6,))


@pytest.mark.parametrize("name", ["fedavg", "fedprox"])
def test_client_losses_equal_vmap_of_the_methods_loss_through_functional_call(tmp_path, name):
    alg = algorithm(tmp_path, name)
    model = alg.working_model()
    anchor = {n: t.detach() for n, t in model.state_dict().items()}  # FedProx's input; FedAvg's loss takes none
    losses = ClientLosses(alg, model, [{"anchor": anchor} if name == "fedprox" else {}] * K)
    assert losses.stacks_forward and losses.base_loss == (name == "fedavg") == keeps_base_loss(alg)
    params = stacked_params(model)
    x, y, w = torch.randn(K, B, 6), torch.randint(0, 3, (K, B)), torch.tensor([[1.0] * B, [1.0, 1.0, 1.0, 0.0],
                                                                                [1.0, 0.0, 0.0, 0.0]])
    fast, h = losses.losses(params, {}, x, y, w, [])
    reference, h_ref = vmap(losses.one)(params, {}, x, y, w, [])
    assert torch.allclose(fast, reference, atol=1e-6) and torch.allclose(h, h_ref, atol=1e-6)


def test_a_shared_start_gives_each_clients_loss_from_one_forward_pass(tmp_path):
    alg = algorithm(tmp_path, "fedavg")
    model = alg.working_model()
    theta = {n: t.detach() for n, t in model.state_dict().items()}
    x, y, w = torch.randn(K, B, 6), torch.randint(0, 3, (K, B)), torch.ones(K, B)
    w[2, 1:] = 0
    shared = ClientLosses(alg, model, [{}]).shared_start(theta, x, y, w)
    one_by_one = [ClientLosses(alg, model, [{}]).one(theta, {}, x[k], y[k], w[k], [])[0] for k in range(K)]
    assert torch.allclose(shared, torch.stack(one_by_one), atol=1e-6)
