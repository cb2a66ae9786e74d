"""The plain loop and the vectorised loop on a model where the model is the cost (benchmarks/model_cost.py): a
CNN, the character LSTM.

The loops are benchmarks/bare_loop.py's and benchmarks/vectorized_loop.py's (the same clients, sampled clients,
mini-batches, SGD and sample-weighted average as Mooring); the model is Mooring's own module, built and
initialised as Mooring builds the global model (`Algorithm.new_model`), so every row starts from the same θ⁰ and,
on the same batches, follows the same trajectory (tests/test_bench_model_cost.py). The module is plain PyTorch
(its forward is features then classifier); under torch.func the character model runs its recurrence step by step
(tasks/models/text.py), since the fused LSTM kernel has no batching rule.

Run as its own process (one intra-op thread; one throwaway round on a copy of the model first, as Mooring's start-up
runs one: bare_loop.throwaway_round), it prints one JSON line: {"round_ends": seconds from the first
round's start to each round's end, its evaluation included, "accuracies": the global model's accuracy after each
evaluated round}:

    python -m benchmarks.model_loops configs/default.yaml --set model.name=acar_cnn ... [--vectorized]
"""
from __future__ import annotations

import json
import time

from torch import nn

from benchmarks.bare_loop import (
    check_supported,
    loop_arguments,
    prepare_workload,
    reference_loop,
    set_up_reference_process,
    throwaway_round,
)
from benchmarks.common import loop_options, loop_process
from benchmarks.workload import Workload

MODELS = ("acar_cnn", "char_rnn")


def load_model_workload(cfg) -> tuple[Workload, nn.Module]:
    """The workload (benchmarks/bare_loop.py) and Mooring's global model at θ⁰."""
    from orchestrator.experiment.methods import build_algorithm

    workload, data = prepare_workload(cfg)
    return workload, build_algorithm(cfg, data.num_classes, data.input_shape).new_model()


def timed_rounds(cfg, vectorized: bool = False) -> dict[str, list[float]]:
    """Set up outside the clock and a throwaway round (bare_loop.throwaway_round), then each round's end from the
    first round's start, and the accuracies."""
    check_supported(cfg, vectorized, models=MODELS)
    set_up_reference_process()
    workload, model = load_model_workload(cfg)
    train = reference_loop(vectorized)
    throwaway_round(train, model, workload)
    ends: list[float] = []
    start = time.perf_counter()
    accuracies = train(model, workload, ends)
    return {"round_ends": [end - start for end in ends], "accuracies": accuracies}


def reference_process(config: str, overrides: list[str], cwd: str, vectorized: bool = False) -> dict[str, list[float]]:
    """`timed_rounds` in a fresh process (the plain loop, or with `vectorized` the vectorised loop)."""
    kind = "vectorised loop" if vectorized else "plain loop"
    return loop_process("benchmarks.model_loops", config, overrides, cwd, kind, loop_options(vectorized))[0]


def main() -> None:
    from orchestrator.experiment.config import load_config

    args = loop_arguments("python -m benchmarks.model_loops")
    print(json.dumps(timed_rounds(load_config(args.config, args.overrides), args.vectorized)), flush=True)


if __name__ == "__main__":
    main()
