"""What one run's life cycle carries from step to step (orchestrator/driver/run.py): what the caller asked for, and,
once its directory is chosen, the run's log, stop signals, phase timings and the rounds so far."""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from orchestrator.driver.run_dir import RunLog
from orchestrator.driver.signals import StopSignals
from orchestrator.experiment.config import ExperimentConfig
from orchestrator.phases import Phases


@dataclass(frozen=True)
class RunRequest:
    """`run_experiment`'s arguments: see its docstring."""

    cfg: ExperimentConfig
    address: str | None = None
    resume_dir: str | None = None
    progress: bool = True
    parent_run_id: str | None = None
    on_round: Callable[[dict[str, Any]], None] | None = None
    stop_after: int | None = None
    run_dir: str | None = None
    from_round: int | None = None
    data: Future | None = None
    tracker: Any | None = None  # a TrackerProcess already launched (orchestrator/reporting/tracker_process.py)
    run_name: str | None = None  # its MLflow run's name (None: orchestrator/reporting/run_names.py, run_name)

    @property
    def last_round(self) -> int:
        """The round the run stops after: train.rounds, or `stop_after` if sooner."""
        rounds = self.cfg.train.rounds
        return rounds if self.stop_after is None else min(rounds, self.stop_after)


@dataclass
class RunContext:
    """A run under way: its request, its directory's log, the stop signals, where its time goes, and the
    server snapshot it resumed from (None: a fresh run, or a resume before any checkpoint)."""

    request: RunRequest
    log: RunLog
    stop: StopSignals
    phases: Phases
    snapshot: dict[str, Any] | None
    # resources.clients_on: auto put the clients in the coordinator, so every round is small (at most
    # orchestrator/clients/client_groups.py's small_round_steps optimizer steps): set by the start-up
    small_rounds: bool = False

    @property
    def cfg(self) -> ExperimentConfig:
        return self.request.cfg

    @property
    def resumed(self) -> bool:
        return bool(self.request.resume_dir)


@dataclass
class RoundRecord:
    """The rounds so far: their metrics, each one's wall time as the driver saw it and its seconds on the
    coordinator's own clock, and the rounds MLflow holds already (a resumed run's, not logged again)."""

    history: list[dict[str, Any]]
    tracked: set[int]
    round_seconds: list[float] = field(default_factory=list)
    coordinator_seconds: list[float] = field(default_factory=list)
