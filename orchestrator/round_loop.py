"""The driver's round loop: rounds asked of the coordinator ahead of time, each one's metrics written to
metrics.jsonl and MLflow and shown, checkpoints where due, and a stop request honoured between rounds."""
from __future__ import annotations

import time
from collections import deque
from typing import Any

from orchestrator.results import headline
from orchestrator.run_context import RoundRecord, RunContext
from orchestrator.run_dir import MetricsFile, RunLog
from orchestrator.run_errors import resume_hint
from orchestrator.signals import await_round
from orchestrator.tracking import Tracker

# Rounds asked of the coordinator ahead of the one the driver waits for: it starts the next round as soon as it
# ends one, instead of idling for the metrics' trip to the driver and the next call's back
# (benchmarks/README.md, "Tiny clients").
ROUNDS_AHEAD = 2


class RoundQueue:
    """The coordinator's calls in flight, in the order it runs them: each round, and after it a checkpoint
    where one is due (every `checkpoint.every` rounds, and after the last), asked for with the round."""

    def __init__(self, coordinator, done: int, last: int, every: int):
        self.coordinator, self.submitted, self.last, self.every = coordinator, done, last, every
        self.calls: deque = deque()
        while self.submitted < min(done + ROUNDS_AHEAD, last):
            self.submit()

    def submit(self) -> None:
        self.submitted += 1
        due = (self.every and self.submitted % self.every == 0) or self.submitted == self.last
        self.calls.append((self.coordinator.run_round.remote(), self.coordinator.checkpoint.remote() if due else None))

    def next(self, stopping: bool):
        """(round, checkpoint or None) of the next round; one more round asked for unless stopping, and the
        last round before a stop checkpointed."""
        round_ref, checkpoint = self.calls.popleft()
        if not stopping and self.submitted < self.last:
            self.submit()
        if stopping and not self.calls and checkpoint is None:
            checkpoint = self.coordinator.checkpoint.remote()
        return round_ref, checkpoint


def run_rounds(ctx: RunContext, coordinator, tracker: Tracker, record: RoundRecord) -> str | None:
    """The round loop, appending to `record`. Returns None when done, or a message when a signal stopped it: the
    rounds asked for by then are finished (or abandoned after a grace time) and the last one checkpointed.
    MLflow, metrics.jsonl and on_round overlap the coordinator's next rounds."""
    cfg, history = ctx.cfg, record.history
    bar = progress_bar(ctx.request.progress, cfg.train.rounds, len(history))
    queue = RoundQueue(coordinator, len(history), ctx.request.last_round, cfg.checkpoint.every)
    metrics_file = MetricsFile(ctx.log)
    r0 = time.perf_counter()
    try:
        while queue.calls:
            with ctx.phases("driver: wait for the round"):
                metrics = await_round(queue.calls[0][0], ctx.stop)
            if metrics is None:  # stop requested and the round did not end in time: abandoned
                tracker.flush()
                return f"round {len(history) + 1} abandoned after a stop signal; {resume_hint(ctx.log.run_dir)}"
            stopping = ctx.stop.signum is not None
            _, checkpoint = queue.next(stopping)
            record.round_seconds.append(time.perf_counter() - r0)
            r0 = time.perf_counter()
            history.append(metrics)
            written = record_round(ctx, tracker, record, metrics_file, bar, checkpoint)
            if stopping:
                if not queue.calls:
                    return (f"stopped after round {metrics['round']}; checkpoint {written}; "
                            f"continue with `mooring run --resume {ctx.log.run_dir}`")
                continue
            if ctx.request.on_round is not None:
                ctx.request.on_round(metrics)
    finally:
        metrics_file.update(history, force=True)
        if bar is not None:
            bar.close()
    return None


def record_round(ctx: RunContext, tracker: Tracker, record: RoundRecord, metrics_file: MetricsFile, bar,
                 checkpoint) -> str | None:
    """The last round's metrics into metrics.jsonl (at least at a checkpoint), MLflow and the progress bar; and
    its checkpoint awaited where one was asked for. Returns the checkpoint written, if any."""
    import ray

    metrics, seconds = record.history[-1], record.round_seconds[-1]
    with ctx.phases("driver: metrics.jsonl"):
        metrics_file.update(record.history, force=checkpoint is not None)
    with ctx.phases("driver: MLflow"):
        if metrics["round"] not in record.tracked:
            tracker.log_metrics({**metrics, "seconds_per_round": seconds}, step=metrics["round"])
    advance(bar, metrics, seconds)
    if checkpoint is None:
        return None
    with ctx.phases("driver: wait for the checkpoint"):
        return ray.get(checkpoint)


def backfill_tracking(tracker: Tracker, log: RunLog, resumed_at: int) -> set[int]:
    """A resumed run's MLflow history gets the rounds up to its checkpoint that it lacks (metrics buffered when
    the run was stopped never reached the store), from metrics.jsonl. Returns the rounds the store now has:
    rounds after the checkpoint that it already holds are not logged again when they are re-run."""
    have = tracker.logged_steps("round")
    missing = [m for m in log.read_metrics() if m["round"] <= resumed_at and m["round"] not in have]
    for m in missing:
        tracker.log_metrics(m, step=m["round"])
    tracker.flush()
    return have | {m["round"] for m in missing}


def progress_bar(enabled: bool, total: int, initial: int):
    from orchestrator.progress import Progress

    return Progress(total, "rounds", initial=initial, enabled=enabled)


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f} %"


def advance(progress, metrics: dict[str, Any], seconds: float) -> None:
    progress.advance(1, f"global {_pct(headline(metrics))}  "
                        f"personalized {_pct(headline(metrics, 'personalized_accuracy'))}  {seconds:.2f} s/round")
