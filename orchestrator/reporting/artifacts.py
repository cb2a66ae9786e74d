"""What a finished run leaves beside its metrics: the accuracy plot, the final global state, the anchors."""
from __future__ import annotations

import threading
from contextlib import suppress
from pathlib import Path

from orchestrator.io import storage
from orchestrator.reporting.results import RunResult
from orchestrator.reporting.tracking import Tracker


def import_plotting_meanwhile(run_dir: str) -> threading.Thread | None:
    """Import matplotlib (benchmarks/README.md, "Whole run") in a thread while the run starts (orchestrator/driver/run_start.py),
    so that the accuracy plot at the end only draws; the thread (None: nothing to plot). A failure shows when the
    plot imports it again."""
    if storage.is_remote(run_dir):
        return None
    from orchestrator.reporting.plots import import_pyplot

    def quietly() -> None:
        with suppress(Exception):
            import_pyplot()

    # not a daemon: the interpreter ending a daemon thread inside an extension's C++ init (an early exit) aborts
    thread = threading.Thread(target=quietly, name="mooring-import-matplotlib")
    thread.start()
    return thread


def finish_artifacts(cfg, result: RunResult, final_state, run_dir: str, tracker: Tracker) -> None:
    """The accuracy plot, the final global state and the resolved config, in the run directory and in MLflow;
    for anchor and prototype methods also the anchors and a PNG of their pairwise cosine similarities."""
    from orchestrator.reporting.plots import experiment_title, has_clock, plot_against_time, plot_comparison

    if storage.is_remote(run_dir):
        return
    directory = Path(run_dir)
    plot_comparison({cfg.algorithm.block_name: result.history}, directory / "accuracy.png",
                    title=experiment_title(cfg, [cfg.seed], cfg.algorithm.block_name))
    storage.write_bytes_atomic(str(directory / "final_state.pt"), storage.torch_bytes(final_state))
    names = ["config.yaml", "accuracy.png", "final_state.pt", "metrics.jsonl", "result.json"]
    if has_clock({cfg.algorithm.block_name: result.history}):
        plot_against_time({cfg.algorithm.block_name: result.history}, directory / "accuracy_time.png",
                          title=experiment_title(cfg, [cfg.seed], cfg.algorithm.block_name))
        names.append("accuracy_time.png")
    names += anchor_artifacts(final_state, directory, cfg.algorithm.name)
    for name in names:
        tracker.log_artifact(directory / name)


ANCHOR_KEYS = ("anchors", "prototypes")


def anchor_artifacts(state, run_dir: Path, algorithm: str) -> list[str]:
    import torch

    from orchestrator.reporting.plots import plot_matrix

    written = []
    for key in ANCHOR_KEYS:
        anchors = state.get(key) if isinstance(state, dict) else None
        if not isinstance(anchors, torch.Tensor) or anchors.dim() != 2:
            continue
        storage.write_bytes_atomic(str(run_dir / f"{key}.pt"), storage.torch_bytes(anchors))
        unit = torch.nn.functional.normalize(anchors.double(), dim=1)
        plot_matrix((unit @ unit.T).numpy(), run_dir / f"{key}_cosine.png",
                    title=f"{algorithm}: pairwise cosine similarity of the {key}", label="cosine")
        written += [f"{key}.pt", f"{key}_cosine.png"]
    return written
