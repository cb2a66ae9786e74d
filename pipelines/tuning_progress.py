"""A row's tuning carried from one machine to the next, trial by trial.

`mooring table --tune` keeps its Optuna studies in a SQLite file under the results directory, so on the machine
that ran them a stopped tuning resumes where it stopped. Where that directory is gone (a fresh machine, a fresh
clone), the tuned-values file is all that remains: it records every finished row, and, for the row a stop
(Ctrl-C, SIGTERM, an error) interrupted, the finished trials of each of its studies (`in_progress`). On the next
`--tune` those trials are put back into fresh studies of the same names before the row's sweep runs, so it
runs only the trials still missing, and its sampler and pruner see what the earlier machine measured.

A record holds only finished trials (complete or pruned), with everything Optuna needs to judge by them: their
parameters and the distributions they were drawn from, their value and their intermediate values."""
from __future__ import annotations

from typing import Any

from pipelines.sweep_optuna import open_storage, quiet_optuna

FINISHED = ("COMPLETE", "PRUNED")


def row_studies(storage, base: str) -> list[str]:
    """The names of a row's studies in the storage: `base` and its widened searches (`base`-widened<n>)."""
    names = quiet_optuna().get_all_study_names(storage=storage)
    return sorted(n for n in names if n == base or n.startswith(f"{base}-widened"))


def trial_record(trial) -> dict[str, Any]:
    """One finished trial as the tuned-values file keeps it (plain YAML: numbers, strings, lists, dicts)."""
    from optuna.distributions import distribution_to_json

    return {"params": dict(trial.params), "state": trial.state.name, "value": trial.value,
            "intermediate": {int(step): float(v) for step, v in sorted(trial.intermediate_values.items())},
            "distributions": {p: distribution_to_json(d) for p, d in trial.distributions.items()}}


def study_progress(storage_url: str, base: str) -> dict[str, dict[str, Any]]:
    """study name → its direction and finished trials, for every study of the row named `base` (none: {})."""
    optuna = quiet_optuna()
    storage = open_storage(storage_url)
    out = {}
    for name in row_studies(storage, base):
        study = optuna.load_study(study_name=name, storage=storage)
        finished = [trial_record(t) for t in study.get_trials(deepcopy=False)
                    if t.state.name in FINISHED]
        if finished:
            out[name] = {"direction": study.direction.name.lower(), "trials": finished}
    return out


def restore_progress(storage_url: str, progress: dict[str, dict[str, Any]]) -> int:
    """The recorded studies that the storage lacks, made with their finished trials; how many trials were put
    back (a study the storage already holds is its own record, and is left as it is)."""
    optuna = quiet_optuna()
    from optuna.distributions import json_to_distribution
    from optuna.trial import TrialState, create_trial

    storage = open_storage(storage_url)
    present = set(optuna.get_all_study_names(storage=storage))
    restored = 0
    for name, record in progress.items():
        if name in present:
            continue
        study = optuna.create_study(study_name=name, storage=storage, direction=record["direction"])
        study.add_trials([create_trial(
            params=t["params"], state=TrialState[t["state"]],
            value=t["value"] if t["state"] == "COMPLETE" else None,
            intermediate_values={int(step): v for step, v in t["intermediate"].items()},
            distributions={p: json_to_distribution(d) for p, d in t["distributions"].items()})
            for t in record["trials"]])
        restored += len(record["trials"])
    return restored
