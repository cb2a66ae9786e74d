"""The driver's round loop: rounds asked of the coordinator ahead of time, several a call, each one's metrics written
to metrics.jsonl and MLflow and shown, checkpoints where due, and a stop request honoured between calls."""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.driver.run_context import RoundRecord, RunContext
from orchestrator.driver.run_dir import MetricsFile, RunLog
from orchestrator.driver.run_errors import resume_hint
from orchestrator.driver.signals import await_round
from orchestrator.reporting.results import headline
from orchestrator.reporting.tracking import Tracker

# Calls to the coordinator in flight ahead of the one the driver waits for: it starts the next rounds as soon as it
# ends a call's, instead of idling for the metrics' trip to the driver and the next call's back
# (benchmarks/README.md, "Tiny clients").
CALLS_AHEAD = 2
# A call asks for as many rounds as took about this long, judged by the rounds before (at least one, at most
# MAX_ROUNDS_PER_CALL, never past a due checkpoint): a Ray call costs a fraction of a millisecond, which a round of
# a few milliseconds feels, while a stop waits for the calls in flight.
CALL_SECONDS = 0.05
MAX_ROUNDS_PER_CALL = 64
# Before a round's time is known, a call asks for one round, or this many where the rounds are known to be small
# (RunContext.small_rounds): alone in its call, round 1 would pay a call's latency by itself, about as much as the
# round (benchmarks/README.md, "Fixed cost").
FIRST_CALL_SMALL_ROUNDS = 8


@dataclass
class RoundsCall:
    """One call in flight: its rounds, and after them a checkpoint where one is due."""

    rounds: Any  # ObjectRef of [(metrics, seconds)], one per round ended
    checkpoint: Any | None  # ObjectRef of the checkpoint's path


class RoundQueue:
    """The coordinator's calls in flight, in the order it runs them: each a run of rounds, and after it a checkpoint
    where one is due (every `checkpoint.every` rounds, or with `auto` once `auto_seconds` have passed since the
    previous one; and after the last), asked for with the rounds."""

    def __init__(self, coordinator, done: int, last: int, every: int | Literal["auto"],
                 per_call: int | Literal["auto"] = "auto", auto_seconds: float = 30.0, first_per_call: int = 1):
        self.coordinator, self.submitted, self.last = coordinator, done, last
        self.every = 0 if every == "auto" else every
        self.timed, self.auto_seconds, self.since = every == "auto", auto_seconds, time.monotonic()
        self.fixed = per_call != "auto"  # resources.rounds_per_call
        self.per_call = per_call if self.fixed else first_per_call  # auto: until a round's time is known
        self.calls: deque[RoundsCall] = deque()
        while len(self.calls) < CALLS_AHEAD and self.submitted < last:
            self.submit()

    def submit(self) -> None:
        count = min(self.per_call, self.last - self.submitted)
        if self.every:  # up to the next due checkpoint
            count = min(count, self.every - self.submitted % self.every)
        self.submitted += count
        due = (self.every and self.submitted % self.every == 0) or self.submitted == self.last or self._time_due()
        if due:
            self.since = time.monotonic()
        # `more`: the round after these will be asked for too, so that their last may start its clients' training
        self.calls.append(RoundsCall(self.coordinator.run_rounds.remote(count, self.submitted < self.last),
                                     self.coordinator.checkpoint.remote() if due else None))

    def _time_due(self) -> bool:
        """checkpoint.every: auto: whether `auto_seconds` have passed since the previous checkpoint was asked for."""
        return self.timed and time.monotonic() - self.since >= self.auto_seconds

    def observe(self, seconds_per_round: float) -> None:
        """The rounds' time so far: later calls ask for about CALL_SECONDS of rounds (unless fixed)."""
        if not self.fixed:
            self.per_call = max(1, min(MAX_ROUNDS_PER_CALL, int(CALL_SECONDS / max(seconds_per_round, 1e-6))))

    def next(self, stopping: bool) -> Any | None:
        """The checkpoint after the call the driver waited for, or None; one more call submitted unless stopping,
        and the last rounds before a stop checkpointed."""
        call = self.calls.popleft()
        checkpoint = call.checkpoint
        if not stopping and self.submitted < self.last:
            self.submit()
        if stopping and not self.calls and checkpoint is None:
            checkpoint = self.coordinator.checkpoint.remote()
        return checkpoint


def run_rounds(ctx: RunContext, coordinator, tracker: Tracker, record: RoundRecord) -> str | None:
    """The round loop, appending to `record`. Returns None when done, or a message when a signal stopped it: the
    rounds asked for by then are finished (or abandoned after a grace time) and the last one checkpointed.
    MLflow, metrics.jsonl and on_round overlap the coordinator's next rounds."""
    cfg, history = ctx.cfg, record.history
    bar = progress_bar(ctx.request.progress, cfg.train.rounds, len(history))
    queue = RoundQueue(coordinator, len(history), ctx.request.last_round, cfg.checkpoint.every,
                       cfg.resources.rounds_per_call, cfg.checkpoint.auto_seconds,
                       FIRST_CALL_SMALL_ROUNDS if ctx.small_rounds else 1)
    metrics_file = MetricsFile(ctx.log)
    r0 = time.perf_counter()
    try:
        while queue.calls:
            with ctx.phases("driver: wait for the round"):
                ended = await_round(queue.calls[0].rounds, ctx.stop)
            if ended is None:  # stop requested and the rounds did not end in time: abandoned
                tracker.flush()
                return f"round {len(history) + 1} abandoned after a stop signal; {resume_hint(ctx.log.run_dir)}"
            stopping = ctx.stop.signum is not None
            in_coordinator = [seconds for _, seconds in ended]
            queue.observe(sum(in_coordinator) / len(ended))
            checkpoint = queue.next(stopping)
            wall, r0 = time.perf_counter() - r0, time.perf_counter()
            for i, ((metrics, own), share) in enumerate(zip(ended, shares_of(wall, in_coordinator))):
                record.round_seconds.append(share)
                record.coordinator_seconds.append(own)
                history.append(metrics)
                written = record_round(ctx, tracker, record, metrics_file, bar,
                                       checkpoint if i == len(ended) - 1 else None)
                if not stopping and ctx.request.on_round is not None:
                    ctx.request.on_round(metrics)
            if stopping and not queue.calls:
                return (f"stopped after round {history[-1]['round']}; checkpoint {written}; "
                        f"continue with `mooring run --resume {ctx.log.run_dir}`")
    finally:
        metrics_file.update(history, force=True)
        if bar is not None:
            bar.close()
    return None


def shares_of(wall: float, in_coordinator: list[float]) -> list[float]:
    """Each round's share of the `wall` seconds the driver waited for their call: in proportion to its seconds in
    the coordinator, so that the rounds' seconds add up to the loop's time."""
    total = sum(in_coordinator)
    return [wall * s / total if total > 0 else wall / len(in_coordinator) for s in in_coordinator]


def record_round(ctx: RunContext, tracker: Tracker, record: RoundRecord, metrics_file: MetricsFile, bar,
                 checkpoint) -> str | None:
    """The last round's metrics into metrics.jsonl (at least at a checkpoint), MLflow and the progress bar; and
    its checkpoint awaited where one was asked for. Returns the checkpoint written, if any."""
    from orchestrator.driver.local_coordinator import get

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
        return get(checkpoint)


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
    from orchestrator.reporting.progress import Progress

    return Progress(total, "rounds", initial=initial, enabled=enabled)


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f} %"


def advance(progress, metrics: dict[str, Any], seconds: float) -> None:
    progress.advance(1, f"global {_pct(headline(metrics))}  "
                        f"personalized {_pct(headline(metrics, 'personalized_accuracy'))}  {seconds:.2f} s/round")
