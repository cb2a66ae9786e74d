"""The settings any method may take beside its own block (the optimizer, algorithm.averaging,
algorithm.server_optimizer, algorithm.calibration), checked against what the named method can do: one line per
refusal, at config validation, so `run`, `compare`, `sweep` and `claims` refuse before anything runs."""
from __future__ import annotations


def method_settings_refusal(cfg) -> tuple[str, object, str]:
    """(key, value, why) of the first setting the named method cannot take; ("", None, "") if none."""
    from tasks.algorithms import ALGORITHMS
    from tasks.algorithms.local_sgd import optimizer_refusal

    method, algorithm = ALGORITHMS.get(cfg.algorithm.name), cfg.algorithm
    can = method.capabilities()
    refusal = optimizer_refusal(method, cfg.train.optimizer.name)
    if refusal:
        return "train.optimizer.name", cfg.train.optimizer.name, refusal
    if algorithm.averaging and not (can.averages_models or method.follows_averaging):
        return "algorithm.averaging", algorithm.averaging, (f"{method.name} aggregates in its own way, which "
                                                            "does not read algorithm.averaging; leave it unset")
    for key, setting in (("server_optimizer", algorithm.server_optimizer), ("calibration", algorithm.calibration)):
        if setting is None:
            continue
        if not can.global_model:
            return f"algorithm.{key}", setting.name, f"{method.name} has no global model to {key.replace('_', ' ')}"
        if cfg.participation.mode == "buffered":
            return f"algorithm.{key}", setting.name, "buffered aggregation has no round to apply it to"
    if algorithm.calibration is not None and builds_own_global_model(method):
        return ("algorithm.calibration", algorithm.calibration.name,
                f"{method.name} evaluates a global model of its own making (CReFF: the body under its re-trained "
                "classifier), which the calibrated classifier would not replace: CCVR would change nothing")
    if algorithm.calibration is not None and cfg.privacy_settings.active:
        return ("algorithm.calibration", algorithm.calibration.name,
                "CCVR's class means and covariances would leave the clients unprotected by the privacy block")
    if algorithm.server_optimizer is not None and method.name == "fedavgm":
        return ("algorithm.server_optimizer", algorithm.server_optimizer.name,
                "fedavgm already steps its server momentum (algorithm.fedavgm); run fedavg with a server optimiser")
    return "", None, ""


def builds_own_global_model(method) -> bool:
    """Whether the method evaluates a global model of its own making rather than its state's "model" (CReFF's
    re-trained head), where calibration puts its calibrated classifier."""
    from tasks.algorithms.base import Algorithm
    from tasks.algorithms.capabilities import defines

    return defines(method, Algorithm, "global_model")


def optimizer_note(cfg) -> str:
    """The one line a run prints where the method's plain-SGD formula meets momentum ("" otherwise)."""
    from tasks.algorithms import ALGORITHMS
    from tasks.algorithms.local_sgd import optimizer_note as note

    opt = cfg.train.optimizer
    return note(ALGORITHMS.get(cfg.algorithm.name), opt.name, opt.momentum)


def nonfinite_loss_advice(cfg) -> str:
    """What a non-finite training loss most likely asks of the user: a robust aggregator where attacked updates
    are averaged, the privacy noise where noise is added to
    the models' updates (its std z·C can swamp any model), the optimiser where the method's formula assumes plain
    SGD and the run uses momentum, else the learning rate."""
    from tasks.algorithms import ALGORITHMS

    threat = cfg.threat
    mean = cfg.algorithm.aggregator is None or cfg.algorithm.aggregator.name == "mean"
    if threat is not None and not threat.poisons_data and mean:
        return (f"the malicious clients' updates (threat.attack={threat.attack}) may have driven the mean off: "
                "set algorithm.aggregator (docs/robustness.md)")
    dp = cfg.privacy.models
    if dp.clip is not None and (dp.noise_multiplier or dp.local_noise_multiplier):
        noises = [f"{key} is {z:g}" for key, z in (("privacy.models.noise_multiplier", dp.noise_multiplier),
                                                    ("privacy.models.local_noise_multiplier",
                                                     dp.local_noise_multiplier)) if z]
        return (f"{' and '.join(noises)} with privacy.models.clip {dp.clip:g} (noise of std multiplier × clip on "
                "the updates): lower the noise multiplier or the clip (or lower train.optimizer.lr)")
    method, opt = ALGORITHMS.get(cfg.algorithm.name), cfg.train.optimizer
    if method.plain_sgd and opt.momentum > 0:
        return (f"{method.name}'s update assumes plain SGD and train.optimizer.momentum is {opt.momentum:g}: "
                "try train.optimizer.momentum=0 (or a lower train.optimizer.lr)")
    return "lower train.optimizer.lr (or set train.grad_clip)"
