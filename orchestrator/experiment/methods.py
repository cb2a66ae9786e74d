"""The run's method object, built from its config: the same one on the coordinator and on every client host."""
from __future__ import annotations

from tasks.algorithms import ALGORITHMS, Algorithm, Setup, TrainSettings
from tasks.algorithms.base import State
from tasks.algorithms.server_optimizers import DEFAULT_LR, ServerOptimizer, parameter_names
from tasks.algorithms.server_side import ServerAlgorithm

SERVER_OPTIMIZER_KEY = "server_optimizer"  # where the server state keeps algorithm.server_optimizer's moments


def train_settings(cfg) -> TrainSettings:
    t = cfg.train
    return TrainSettings(
        rounds=t.rounds, local_epochs=t.local_epochs, local_steps=t.local_steps, batch_size=t.batch_size,
        drop_last=t.drop_last, optimizer=t.optimizer.name, lr=t.optimizer.lr, momentum=t.optimizer.momentum,
        weight_decay=t.optimizer.weight_decay, schedule=t.lr_schedule.name, gamma=t.lr_schedule.gamma,
        grad_clip=t.grad_clip,
    )


def build_algorithm(cfg, num_classes: int, input_shape: tuple[int, ...]) -> Algorithm:
    setup = Setup(num_classes=num_classes, input_shape=tuple(input_shape), num_clients=cfg.data.num_clients,
                  model_name=cfg.model.name, model_options=cfg.model.options, model_init=cfg.model.init,
                  model_head_init=cfg.model.head_init, train=train_settings(cfg), seed=cfg.seed,
                  stats_privacy=cfg.privacy_settings.stats, averaging=cfg.algorithm.averaging)
    return ALGORITHMS.get(cfg.algorithm.name)(cfg.algorithm.params_for(), setup)


def server_optimizer_of(cfg) -> ServerOptimizer | None:
    """algorithm.server_optimizer as the building block that steps it, or None."""
    opt = cfg.algorithm.server_optimizer
    if opt is None:
        return None
    return ServerOptimizer(opt.name, DEFAULT_LR[opt.name] if opt.lr is None else opt.lr, opt.momentum, opt.beta2,
                           opt.tau)


def server_optimizer_step(algorithm: ServerAlgorithm, optimizer: ServerOptimizer, before: State,
                          after: State) -> State:
    """The state after the method's aggregate, its global model stepped by the server optimiser from `before`."""
    model, slots = optimizer.step(before["model"], after["model"], after.get(SERVER_OPTIMIZER_KEY, {}),
                                  parameter_names(algorithm.working_model()))
    return {**after, "model": model, SERVER_OPTIMIZER_KEY: slots}
