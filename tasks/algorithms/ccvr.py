"""CCVR (Luo et al. 2021, "No Fear of Heterogeneity: Classifier Calibration for Federated Learning with Non-IID
Data"): post-hoc calibration of a global model's classifier on virtual features drawn from class Gaussians
(docs/methods/ccvr.md). A modifier of any method with a global model (`algorithm.calibration: {name: ccvr}`).

1. Every client runs the global model's feature extractor over its training split (eval mode) and sends, per class
   c, its count N_{c,k}, feature sum and sum of outer products h·hᵀ (`gaussian_stats`).
2. The server pools them (`class_gaussians`): μ_c = Σ_k sums/N_c and the unbiased covariance
   Σ_c = (Σ_k outer − N_c·μ_c·μ_cᵀ)/(N_c − 1), which is the paper's eq. (4) from the clients' means and covariances.
3. It draws M_c virtual features per class from N(μ_c, Σ_c) and trains the classifier alone (from the global one)
   with cross-entropy by SGD on them (`calibrated_classifier`). The calibrated model is what is evaluated; training
   goes on from the uncalibrated one, as post-hoc calibration leaves the federated training as it was.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from tasks.algorithms import optimizers
from tasks.algorithms.base import State, evaluating
from tasks.models import FLModel

JITTER = 1e-5  # added to Σ_c's diagonal so a covariance of rank < d (few samples, ReLU zeros) can be sampled


@torch.no_grad()
def gaussian_stats(model: FLModel, x: torch.Tensor, y: torch.Tensor, num_classes: int) -> State:
    """Per-class counts, feature sums and sums of outer products of the model's features on (x, y)."""
    with evaluating(model):
        h = model.features(x).to(torch.float64)
    member = F.one_hot(y, num_classes).to(torch.float64)  # [n, C]
    return {"counts": member.sum(0).cpu(), "sums": (member.T @ h).cpu(),
            "outer": torch.einsum("nc,nd,ne->cde", member, h, h).cpu()}


def class_gaussians(stats: list[State]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(N_c, μ_c, Σ_c) pooled over the clients' stats; Σ_c is 0 for a class of fewer than two samples."""
    counts = sum(s["counts"] for s in stats)
    sums, outer = sum(s["sums"] for s in stats), sum(s["outer"] for s in stats)
    means = sums / counts.clamp_min(1)[:, None]
    scatter = outer - counts[:, None, None] * means[:, :, None] * means[:, None, :]
    covariances = scatter / (counts - 1).clamp_min(1)[:, None, None]
    covariances[counts < 2] = 0.0
    return counts, means, covariances


def virtual_features(counts, means, covariances, per_class: int, generator: torch.Generator):
    """M_c draws from N(μ_c, Σ_c) for every class some client holds: (features [M, d], labels [M])."""
    features, labels = [], []
    d = means.shape[1]
    for c in torch.nonzero(counts > 0).flatten().tolist():
        root = torch.linalg.cholesky(covariances[c] + JITTER * torch.eye(d, dtype=covariances.dtype))
        z = torch.randn(per_class, d, generator=generator, dtype=torch.float64)
        features.append(means[c] + z @ root.T)
        labels.append(torch.full((per_class,), c))
    return torch.cat(features), torch.cat(labels)


def calibrated_classifier(classifier: torch.nn.Linear, features: torch.Tensor, labels: torch.Tensor, steps: int,
                          lr: float, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """The classifier's tensors after `steps` of SGD on cross-entropy over mini-batches of the virtual features."""
    weight = classifier.weight.detach().clone().requires_grad_(True)
    bias = None if classifier.bias is None else classifier.bias.detach().clone().requires_grad_(True)
    params = [weight] if bias is None else [weight, bias]
    optimizer = optimizers.SGD(params, lr=lr)
    features = features.to(weight.dtype)
    for _ in range(steps):
        idx = torch.randint(len(labels), (min(batch_size, len(labels)),), generator=generator)
        loss = F.cross_entropy(F.linear(features[idx], weight, bias), labels[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    out = {"weight": weight.detach()}
    return out if bias is None else {**out, "bias": bias.detach()}


def calibrate(model: FLModel, stats: list[State], settings, generator: torch.Generator) -> State:
    """The model's state with its classifier calibrated on virtual features (`settings`: algorithm.calibration)."""
    counts, means, covariances = class_gaussians(stats)
    features, labels = virtual_features(counts, means, covariances, settings.samples_per_class, generator)
    head = calibrated_classifier(model.classifier, features, labels, settings.steps, settings.lr,
                                 settings.batch_size, generator)
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    return {**state, **{f"classifier.{k}": v.cpu() for k, v in head.items()}}
