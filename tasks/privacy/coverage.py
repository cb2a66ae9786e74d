"""What each built-in method sends besides its metrics, and whether the `privacy` block covers it: a run with
privacy on refuses, in one line, a method that would send something no mechanism protects (docs/privacy.md)."""
from __future__ import annotations

from enum import Enum

from tasks.privacy.settings import Privacy


class Shared(Enum):
    MODEL = "its model, every round"  # clipped against the payload model: privacy.models
    CLASS_STATS = "per-class feature statistics"  # privacy.stats
    PERIODIC_MODEL = "its model every few rounds, against a model it was not sent that round"
    PSEUDO_DATA = "pseudo-data built from its inputs"
    # LG-FedAvg's and FedGen's head, FML's shared model, FedKD's SVD-compressed mentee: not the payload model
    # that privacy.models clips updates against
    MODEL_PART = "a model or a part of one other than the payload model (a head, a shared or compressed model)"


SHARES: dict[str, frozenset[Shared]] = {
    "fedavg": frozenset({Shared.MODEL}),
    "fedprox": frozenset({Shared.MODEL}),
    "moon": frozenset({Shared.MODEL}),
    "fedavg_pm": frozenset({Shared.MODEL}),
    "fednh": frozenset({Shared.MODEL, Shared.CLASS_STATS}),
    "fedfa": frozenset({Shared.MODEL, Shared.CLASS_STATS}),
    "fedfm": frozenset({Shared.MODEL, Shared.CLASS_STATS}),
    "fedproto": frozenset({Shared.CLASS_STATS}),
    "fedsa": frozenset({Shared.CLASS_STATS}),
    "fedtgp": frozenset({Shared.CLASS_STATS}),
    "fedgh": frozenset({Shared.CLASS_STATS}),
    "feddistill": frozenset({Shared.CLASS_STATS}),  # per-class mean logits, clipped and noised as features are
    "lg_fedavg": frozenset({Shared.MODEL_PART}),
    "fedgen": frozenset({Shared.MODEL_PART}),
    "fml": frozenset({Shared.MODEL_PART}),
    "fedkd": frozenset({Shared.MODEL_PART}),
    "local": frozenset(),
    "local_pm": frozenset(),
    "fedfm_lite": frozenset({Shared.PERIODIC_MODEL, Shared.CLASS_STATS}),
    "fedavg_periodic": frozenset({Shared.PERIODIC_MODEL}),
    "feddebias": frozenset({Shared.MODEL, Shared.PSEUDO_DATA}),
    "mixup": frozenset({Shared.MODEL}),
    "groupdro": frozenset({Shared.MODEL}),
    "fedmix": frozenset({Shared.MODEL, Shared.PSEUDO_DATA}),  # the means of its batches, before round 0
}
UNCOVERED = (Shared.PERIODIC_MODEL, Shared.PSEUDO_DATA, Shared.MODEL_PART)


def refusal(method: str, privacy: Privacy, clients_per_round: int) -> tuple[str, object, str]:
    """(config key, value, why) when `method` cannot run under these privacy settings, else ("", None, "")."""
    problem = uncovered(method, privacy)
    if problem:
        return "algorithm.name", method, problem
    dp = privacy.models
    if dp.active and dp.adaptive is not None and dp.noise_multiplier > 0:
        count_noise = dp.adaptive.count_noise_multiplier
        if 2 * count_noise <= dp.noise_multiplier:
            return ("privacy.models.adaptive.count_noise_multiplier", count_noise,
                    f"must exceed noise_multiplier / 2 = {dp.noise_multiplier / 2:g} (the count's noise is paid from "
                    f"it; the default is clients per round / 20 = {clients_per_round / 20:g})")
    return "", None, ""


def uncovered(method: str, privacy: Privacy) -> str:
    """Why `method` cannot run under these privacy settings ("" if it can): it sends something that no active
    mechanism protects. A method Mooring does not list (one from outside it) is refused: what it sends is unknown."""
    if not privacy.active:
        return ""
    shares = SHARES.get(method)
    if shares is None:
        return f"{method} is not one of the methods whose uploads the privacy block knows ({', '.join(SHARES)})"
    for what in UNCOVERED:
        if what in shares:
            return f"{method} sends {what.value}, which no privacy mechanism covers; run it without privacy"
    if Shared.MODEL in shares and not privacy.models.active:
        return f"{method} sends {Shared.MODEL.value}: set privacy.models.clip (and its noise) too"
    if Shared.CLASS_STATS in shares and not privacy.stats.active:
        return f"{method} sends {Shared.CLASS_STATS.value}: set privacy.stats.clip (and its noise) too"
    return ""
