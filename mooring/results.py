"""What the Python API returns: a run or a comparison, their histories and tables as pandas DataFrames, and
the accuracy-by-round figure the command line saves (orchestrator/reporting/plots.py) as a matplotlib Figure."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.experiment.config import ExperimentConfig
from orchestrator.reporting.results import RunResult, summary_metrics
from pipelines import comparison


def history_frame(history: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per round, indexed by its number (`round`), a column per metric; a metric a round did not log
    (or logged as null) is NaN."""
    frame = pd.DataFrame.from_records(history)
    if frame.empty:
        return pd.DataFrame(index=pd.Index([], name="round", dtype="int64"))
    return frame.set_index("round")


@dataclass(frozen=True, eq=False)  # a DataFrame has no single truth value to compare by
class Run:
    """One finished run: `history` (a row per round), `summary` (its figures, as `mooring run` prints them),
    `plot()`, and where it lives (`run_dir`, `mlflow_run_id`). `result` is the runtime's own record."""

    config: ExperimentConfig
    result: RunResult
    history: pd.DataFrame = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "history", history_frame(self.result.history))

    @property
    def summary(self) -> dict[str, Any]:
        """The run's figures: final and best accuracies (global and personalized; None where the method has no
        such model), bytes sent, ε reached, rounds, seconds, and the method and seed."""
        r = self.result
        return ({"algorithm": r.algorithm, "seed": r.seed, "rounds": r.rounds, "wall_seconds": r.wall_seconds}
                | summary_metrics(r.history, self.config.participation.target_accuracy))

    @property
    def run_dir(self) -> str:
        return self.result.run_dir

    @property
    def mlflow_run_id(self) -> str | None:
        return self.result.mlflow_run_id

    def plot(self, title: str | None = None):
        """The accuracy-by-round figure of this run (a panel per kind of accuracy), as `mooring run` saves it."""
        from orchestrator.reporting.plots import comparison_figure, experiment_title

        method = self.config.algorithm.block_name
        title = experiment_title(self.config, [self.config.seed], method) if title is None else title
        return comparison_figure({method: self.result.history}, title)

    def __repr__(self) -> str:
        return f"Run({self.result.algorithm}, seed {self.result.seed}, {self.result.rounds} rounds, {self.run_dir})"


@dataclass(frozen=True)
class Comparison:
    """A finished comparison: `table` (a row per variant, mean and std over seeds, as `mooring compare` prints
    it), `runs` (a row per run), `history` (a row per variant, seed and round), `plot()`, and `out` (the
    directory with the CSV, Parquet, PNG and report.html). `result` is the pipeline's own record."""

    config: ExperimentConfig
    seeds: list[int]
    out: Path
    result: comparison.Comparison

    @property
    def table(self) -> pd.DataFrame:
        return pd.DataFrame.from_records(comparison.summary_table(self.result)).set_index("variant")

    @property
    def runs(self) -> pd.DataFrame:
        return pd.DataFrame.from_records(self.result.rows).set_index(["variant", "seed"])

    @property
    def history(self) -> pd.DataFrame:
        """Every run's history in one frame, indexed by (variant, seed, round)."""
        frames = {(variant, seed): history_frame(h) for variant, by_seed in self.result.histories.items()
                  for seed, h in by_seed.items()}
        return pd.concat(frames, names=["variant", "seed", "round"])

    def run_history(self, variant: str, seed: int | None = None) -> pd.DataFrame:
        """One run's history (a row per round); `seed` may be left out when the comparison ran one seed."""
        by_seed = self.result.histories.get(variant)
        if by_seed is None:
            raise KeyError(f"{variant!r}: not a variant of this comparison; variants: {', '.join(self.result.histories)}")
        if seed is None and len(by_seed) != 1:
            raise KeyError(f"{variant!r} ran seeds {', '.join(map(str, by_seed))}: name one")
        return history_frame(by_seed[next(iter(by_seed)) if seed is None else seed])

    def plot(self, title: str | None = None):
        """The accuracy-by-round figure, a line per variant (mean over seeds, ± std as a band), as
        `mooring compare` saves it in accuracy.png."""
        from orchestrator.reporting.plots import comparison_figure, experiment_title

        title = experiment_title(self.config, self.seeds) if title is None else title
        return comparison_figure(self.result.histories, title)

    def __str__(self) -> str:
        return comparison.format_table(comparison.summary_table(self.result))

    def __repr__(self) -> str:
        return f"Comparison({', '.join(self.result.histories)}; seeds {self.seeds}; {self.out})"
