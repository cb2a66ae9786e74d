"""`mooring.config`, `mooring.run` and `mooring.compare`: the commands `mooring run` and `mooring compare` as
functions that return their results (mooring/results.py). Each connects to Ray (RAY_ADDRESS, `address`, or a
local instance it starts and leaves running for the next call) and checks its input as the command line does,
raising MooringError with the same one line."""
from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from numbers import Integral
from pathlib import Path
from typing import Any

from mooring.errors import one_line_errors
from mooring.results import Comparison, Run
from mooring.settings import ConfigSource, Overrides, resolve
from orchestrator.experiment.config import ConfigError, ExperimentConfig

# what `methods` may be: algorithm names, or {label: its overrides} (as `--variant` gives them)
Methods = Sequence[str] | Mapping[str, Mapping[str, Any]]


def config(source: ConfigSource = None, overrides: Overrides = None, /, **settings: Any) -> ExperimentConfig:
    """The validated config: `source` (a YAML file, a mapping, an ExperimentConfig or None for the defaults) with
    the overrides ({"train.rounds": 5}) and keyword settings (train={"rounds": 5}, seed=1) applied."""
    with one_line_errors():
        return resolve(source, overrides, settings)


def run(source: ConfigSource = None, overrides: Overrides = None, /, *, address: str | None = None,
        progress: bool = True, **settings: Any) -> Run:
    """One federated run, as `mooring run CONFIG --set KEY=VALUE ...` runs it (the same history for the same
    config and seed): MLflow run, run directory, checkpoints and all. Local paths in the config are taken from
    the current directory."""
    from orchestrator.driver.run import run_experiment
    from pipelines.comparison import absolute_paths

    with one_line_errors():
        cfg = absolute_paths(resolve(source, overrides, settings))
        return Run(cfg, run_experiment(cfg, address=address, progress=progress))


def compare(source: ConfigSource = None, methods: Methods | None = None, overrides: Overrides = None, /, *,
            seeds: Sequence[int] | None = None, out: str | Path = "results/compare", baseline: str | None = None,
            address: str | None = None, parallel: int | None = None, progress: bool = True,
            **settings: Any) -> Comparison:
    """Every method (or labelled variant) × seed on one base config, every seed's runs on the same partition, as
    `mooring compare` runs them: `methods` is a list of algorithm names or {label: overrides}; None is the
    config's own algorithm; `seeds` defaults to the config's seed. The tables, histories, plot and report.html
    are written to `out` too."""
    from mooring.settings import dotted_overrides
    from pipelines.compare import check_parallel, named_variants, refuse_shadowed, variant_called
    from pipelines.compare import compare as compare_runs

    with one_line_errors():
        check_parallel(parallel, "parallel")
        variants = _variants(methods)
        base = resolve(source, overrides, settings)
        refuse_shadowed(dotted_overrides(overrides, settings), {f"methods {label}": o for label, o in variants.items()},
                        "overrides")
        variants = variants or named_variants([base.algorithm.name], "algorithm.name")
        seeds = _seeds(seeds, base.seed)
        baseline = variant_called(baseline, variants, "baseline")
        echo = (lambda s: print(s, file=sys.stderr)) if progress else (lambda s: None)
        result = compare_runs(base, variants, seeds, out, address=address, parallel=parallel, echo=echo,
                              progress=progress, baseline=baseline, given=dotted_overrides(overrides, settings))
        return Comparison(base, seeds, Path(out), result)


def _variants(methods: Methods | None) -> dict[str, dict[str, Any]]:
    """{label: overrides}, every algorithm found (an outside one imported) before the base config is read, so
    that the overrides may name its block; each label once."""
    from pipelines.compare import find_algorithm, named_variants

    if methods is None:
        return {}
    if isinstance(methods, str) or not isinstance(methods, (Sequence, Mapping)):
        raise ConfigError(f"methods {methods!r}: expected a list of algorithm names, for example "
                          "['fedavg', 'fedprox'], or a mapping of labels to overrides")
    if isinstance(methods, Mapping):
        bad = next((label for label, o in methods.items() if not isinstance(o, Mapping)), None)
        if bad is not None:
            raise ConfigError(f"methods {bad}: expected a mapping of dotted keys to values, for example "
                              "{'algorithm.name': 'fedprox', 'algorithm.fedprox.mu': 0.1}")
        variants = {str(label): dict(overrides) for label, overrides in methods.items()}
    else:
        repeated = next((m for i, m in enumerate(methods) if m in methods[:i]), None)
        if repeated is not None:
            raise ConfigError(f"methods: {repeated} is given more than once; give each once")
        variants = named_variants([str(name) for name in methods], "methods")
    for label, overrides in variants.items():
        if "algorithm.name" in overrides:
            find_algorithm(label, str(overrides["algorithm.name"]), "methods")
    if not variants:  # not the config's own algorithm: that is methods=None
        raise ConfigError(f"methods {methods!r}: empty; give at least one algorithm name (or leave methods out for "
                          "the config's own algorithm)")
    return variants


def _seeds(seeds: Sequence[int] | None, default: int) -> list[int]:
    if seeds is None:
        return [default]
    listed = list(seeds) if not isinstance(seeds, (str, bytes)) else []
    if not listed or not all(isinstance(s, Integral) and not isinstance(s, bool) for s in listed):
        raise ConfigError(f"seeds {seeds!r}: expected a list of integers, for example [0, 1, 2]")
    listed = [int(s) for s in listed]  # numpy's integers too
    repeated = next((s for i, s in enumerate(listed) if s in listed[:i]), None)
    if repeated is not None:
        raise ConfigError(f"seeds: {repeated} is given more than once; give each once")
    return listed
