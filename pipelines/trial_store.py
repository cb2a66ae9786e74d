"""A sweep's trials addressed by number, through the Optuna storage the sweep opened and keeps.

Optuna's Study covers one process that asks and tells. A sweep's trials also run in Ray tasks, which report
every round and ask whether to prune, and are handed between drivers (failed for a driver that is gone, put
back to WAITING when two drivers take the last one). Those steps use the storage's own interface
(optuna.storages.BaseStorage, which every Optuna storage implements) and the study's public pruner: no
private attribute of a Study or a Trial, and no Trial constructed by hand.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optuna import Study
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial


class TrialStore:
    """The trials of one study in `storage`, by trial number."""

    def __init__(self, storage: BaseStorage, study_name: str):
        self.storage = storage
        self.study_id = storage.get_study_id_from_name(study_name)

    def trial_id(self, number: int) -> int:
        return self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)

    def get(self, number: int) -> FrozenTrial:
        return self.storage.get_trial(self.trial_id(number))

    def set_user_attr(self, number: int, key: str, value: Any) -> None:
        """On any unfinished trial, whichever process runs it (Trial.set_user_attr needs the Trial object)."""
        self.storage.set_trial_user_attr(self.trial_id(number), key, value)

    def put_back(self, number: int) -> None:
        """A RUNNING trial back to WAITING, its parameters kept: the next study.ask() takes it again."""
        from optuna.trial import TrialState

        self.storage.set_trial_state_values(self.trial_id(number), TrialState.WAITING)


class TrialReporter:
    """What a trial running in a Ray task tells the study each round: Trial.report and Trial.should_prune,
    for a trial asked for by another process."""

    def __init__(self, study: Study, store: TrialStore, number: int):
        self.study, self.store, self.number = study, store, number
        self._trial_id = store.trial_id(number)

    def report(self, value: float, step: int) -> None:
        self.store.storage.set_trial_intermediate_value(self._trial_id, step, float(value))

    def should_prune(self) -> bool:
        return self.study.pruner.prune(self.study, self.store.get(self.number))
