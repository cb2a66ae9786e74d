"""What a client's local SGD does in a round, in numbers: how many optimizer steps it takes, and how much those
steps weigh once momentum has summed them (FedNova's ‖a‖₁, which SCAFFOLD's option II needs too).

- `batch_sizes(n, train)`: the sizes of the mini-batches `base.batch_indices` draws for a client of n training
  samples, without drawing them; `local_step_count(n, train)` their number (so a method reads its K from
  `RoundContext.local_steps` rather than drawing the batches again).
- `effective_steps(K, β)`: with torch's heavy-ball momentum (b_1 = g_1, b_k = β·b_{k−1} + g_k, w ← w − η·b_k), K
  steps move the weights by w_0 − w_K = η·Σ_j a_j·g_j with a_j = (1 − β^{K−j+1})/(1 − β), so
  ‖a‖₁ = [K − β(1 − β^K)/(1 − β)]/(1 − β) (Wang et al. 2020, FedNova, §4 "momentum"); β = 0 gives K.
  (w_0 − w_K)/(η·‖a‖₁) is then the a-weighted mean of the steps' gradients, which is what option II of SCAFFOLD
  and FedNova's normalised update take (docs/methods/scaffold.md §3, docs/methods/fednova.md §2).
- `optimizer_refusal` / `optimizer_note`: what a method whose formula assumes plain SGD (`Algorithm.plain_sgd`)
  does under momentum (its documented adjustment, said in one line when a run starts) and Adam (refused).
"""
from __future__ import annotations


def batch_sizes(num_samples: int, train) -> list[int]:
    """[len(b) for b in base.batch_indices(num_samples, train, g)] without drawing anything (tested equal)."""
    n, size = num_samples, train.batch_size
    if n == 0:
        return []
    if train.local_steps is not None:
        return [min(size, n)] * train.local_steps
    full, rest = divmod(n, size)
    dropped = train.drop_last and n >= size
    return ([size] * full + ([rest] if rest and not dropped else [])) * train.local_epochs


def local_step_count(num_samples: int, train) -> int:
    """len(base.batch_indices(num_samples, train, g)) without drawing anything."""
    return len(batch_sizes(num_samples, train))


def effective_steps(steps: int, momentum: float) -> float:
    """‖a‖₁: the summed weight of `steps` gradients under heavy-ball momentum β (K for plain SGD)."""
    if momentum == 0.0:
        return float(steps)
    beta = momentum
    return (steps - beta * (1 - beta**steps) / (1 - beta)) / (1 - beta)


def optimizer_refusal(method: type, optimizer: str) -> str:
    """Why `method` cannot train under `optimizer` ("" = it can): a plain-SGD formula has no form for Adam."""
    if method.plain_sgd and optimizer == "adam":
        return (f"{method.name}'s update assumes plain SGD ({method.plain_sgd}); it has no form for Adam: "
                "use train.optimizer.name=sgd")
    return ""


def optimizer_note(method: type, optimizer: str, momentum: float) -> str:
    """The one line a run of `method` prints when its plain-SGD formula meets momentum ("" otherwise)."""
    if method.plain_sgd and optimizer == "sgd" and momentum > 0:
        return f"{method.name} under SGD momentum {momentum:g}: {method.plain_sgd}"
    return ""
