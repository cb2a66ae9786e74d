"""Per-round diagnostics computed the same way for every method, so a claim can compare them across methods.

The server computes them from what it already holds: the global state before and after aggregation, the round's
client updates, and a probe set (up to `per_class` images of each class from each global test set). A method
contributes only through its state and updates, so FedAvg, FedProx, FedFA, FedNH, ... are measured alike:

- `feature_distance` (docs/methods/fedfa.md §6.4, "feature distance"): the probe inputs go through every client's
  local model; the ℓ2 distance between two clients' features of the same input, averaged over inputs and
  distinct client pairs (the code also averages the self-pairs, which only scales it). `feature_distance_rel`
  divides it by the mean feature norm, since anchor losses shrink features and the raw distance with them.
- `classifier_update_cosine` (docs/methods/fedfa.md §6.4): the per-row cosine of the clients' classifier updates
  (tasks/algorithms/anchors.py).
- `classifier_movement`: mean over classes of ‖ŵ_c^{t+1} − ŵ_c^t‖, the unit-normalised rows of the global
  classifier before and after the round: FedNH's prototype movement (its classifier rows are the prototypes,
  docs/methods/fednh.md §4), and the same quantity for any method with a global linear head.
- `model_update_norm`: ‖θ^{t+1} − θ^t‖ over the global model's floating tensors; 0 in a round where the global
  model did not change (FedFM-Lite and fedavg_periodic between synchronisations).

A local model is the broadcast global model with the client's returned tensors laid over it, so methods that
return part of the model (FedNH returns the body) are measured too; methods without a global model (FedSA,
FedProto, Local) log none of these.
"""
from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from tasks.algorithms.anchors import CLASSIFIER_PREFIX, classifier_update_cosine
from tasks.algorithms.base import ClientUpdate, State
from tasks.algorithms.server_side import ServerAlgorithm

CLASSIFIER_WEIGHT = CLASSIFIER_PREFIX + "weight"


def probe_inputs(test_sets: dict[str, tuple[torch.Tensor, torch.Tensor]], per_class: int) -> torch.Tensor | None:
    """The first `per_class` images of every class of every test set (rotations included), or None."""
    parts = []
    for x, y in test_sets.values():
        for c in torch.unique(y):
            parts.append(x[y == c][:per_class])
    return torch.cat(parts) if parts else None


def local_states(before: State, updates: list[ClientUpdate]) -> list[State]:
    """Each client's local model: the broadcast global model overlaid with the tensors it returned; empty when
    any update is not (part of) that model."""
    model = before.get("model")
    if not isinstance(model, dict) or not all(u.tensors and set(u.tensors) <= set(model) for u in updates):
        return []
    return [{**model, **u.tensors} for u in updates]


@torch.no_grad()
def feature_distance(algorithm: ServerAlgorithm, states: list[State], probe: torch.Tensor) -> dict[str, float]:
    """Mean pairwise ℓ2 distance of the clients' features on the same probe inputs, raw and relative."""
    if len(states) < 2:
        return {}
    feats = []
    for state in states:
        model = algorithm.working_model(state, key="diagnostics", device="cpu")
        was_training = model.training
        model.eval()
        feats.append(model.features(probe).to(torch.float64))
        model.train(was_training)
    h = torch.stack(feats, dim=1)  # (inputs, clients, d)
    pairs = list(itertools.combinations(range(h.shape[1]), 2))
    dist = torch.stack([(h[:, i] - h[:, j]).norm(dim=1) for i, j in pairs]).mean()
    norm = h.norm(dim=2).mean()
    return {"feature_distance": float(dist), "feature_distance_rel": float(dist / norm) if norm > 0 else float("nan")}


def classifier_movement(before: State, after: State) -> float | None:
    old, new = before.get("model", {}).get(CLASSIFIER_WEIGHT), after.get("model", {}).get(CLASSIFIER_WEIGHT)
    if old is None or new is None:
        return None
    moved = F.normalize(new.to(torch.float64), dim=1) - F.normalize(old.to(torch.float64), dim=1)
    return float(moved.norm(dim=1).mean())


def model_update_norm(before: State, after: State) -> float | None:
    old, new = before.get("model"), after.get("model")
    if not isinstance(old, dict) or not isinstance(new, dict):
        return None
    keys = [k for k in old if k in new and torch.is_floating_point(old[k])]
    return float(sum(float((new[k].double() - old[k].double()).pow(2).sum()) for k in keys) ** 0.5)


def round_diagnostics(algorithm: ServerAlgorithm, before: State, after: State, updates: list[ClientUpdate],
                      probe: torch.Tensor | None) -> dict[str, float]:
    """Every diagnostic that applies to this round's state and updates (see the module docstring)."""
    out: dict[str, float] = {}
    for name, value in (("classifier_movement", classifier_movement(before, after)),
                        ("model_update_norm", model_update_norm(before, after))):
        if value is not None:
            out[name] = value
    states = local_states(before, updates)
    if probe is not None:
        out.update(feature_distance(algorithm, states, probe))
    with_head = [s for s, u in zip(states, updates) if CLASSIFIER_WEIGHT in u.tensors]  # FedNH's head is not sent
    cosine = classifier_update_cosine(with_head, before["model"]) if with_head else None
    if cosine is not None:
        out["classifier_update_cosine"] = cosine
    return out
