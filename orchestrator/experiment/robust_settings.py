"""The aggregator and threat settings a run can take, checked with the config (docs/robustness.md); the server's
half of them is orchestrator/server/robust_round.py."""
from __future__ import annotations

import math
from typing import Any


def aggregator_of(cfg):
    """algorithm.aggregator where it reads each update (anything but the plain mean), else None."""
    aggregator = cfg.algorithm.aggregator
    return aggregator if aggregator is not None and aggregator.reads_updates else None


def robustness_refusal(cfg) -> tuple[str, Any, str]:
    """(key, value, why) of the first aggregator or attack setting this run cannot take; ("", None, "") if none."""
    from tasks.algorithms import ALGORITHMS

    method = ALGORITHMS.get(cfg.algorithm.name)
    can = method.capabilities()
    aggregator, threat = aggregator_of(cfg), cfg.threat
    buffered = cfg.participation.mode == "buffered"
    if aggregator is not None:
        key, name = "algorithm.aggregator", aggregator.name
        if not can.global_model:
            return key, name, f"{method.name} has no global model whose updates it could aggregate"
        if method.no_robust_aggregation:
            return key, name, f"{method.name}: {method.no_robust_aggregation}"
        if buffered:
            return key, name, ("buffered aggregation folds each update in as it arrives; a robust aggregator needs "
                               "a round's updates together")
        if cfg.privacy.models.clip is not None and cfg.privacy.models.noise_multiplier > 0:
            return key, name, ("privacy.models.noise_multiplier calibrates the server's noise to the mean's "
                               "sensitivity, which this aggregator does not have; add the noise at the clients "
                               "(privacy.models.local_noise_multiplier) with noise_multiplier 0")
        if aggregator.name == "krum":
            n = math.ceil(cfg.clients_per_round / aggregator.bucketing)
            if 2 * aggregator.f + 2 >= n:
                return "algorithm.aggregator.f", aggregator.f, (
                    f"Krum assumes 2f + 2 < n, and a round aggregates n = {n} "
                    f"{'buckets' if aggregator.bucketing > 1 else 'updates'}; lower f or sample more clients")
    if threat is not None:
        if buffered:
            return "threat.attack", threat.attack, "buffered aggregation has no round whose updates to attack"
        if threat.poisons_data and threat.selection == "per_round":
            return "threat.selection", "per_round", (f"{threat.attack} poisons the malicious clients' own data, "
                                                     "which stays theirs: use selection fixed")
        if not threat.poisons_data and not can.global_model:
            return "threat.attack", threat.attack, (f"{method.name} has no global model whose updates could be "
                                                    "poisoned; data poisoning (label_flip, backdoor) applies to it")
    return "", None, ""
