"""SIGINT and SIGTERM during a run: interrupt at once during set-up, stop after the rounds in flight during them."""
from __future__ import annotations

import threading
from typing import Any


class RunInterrupted(Exception):
    """SIGINT or SIGTERM stopped the run; the message says what was kept and how to resume."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum


class StopSignals:
    """SIGINT and SIGTERM while a run is in this (main) thread. During set-up a signal interrupts at once
    (KeyboardInterrupt); during the rounds it is only recorded, and the round loop finishes or abandons the
    rounds in flight (at most CALLS_AHEAD calls of rounds), checkpoints and stops. A second signal interrupts at once."""

    def __init__(self):
        self.signum: int | None = None
        self.seen = False  # any signal came, recorded or not (waits on other processes then end sooner)
        self.in_rounds = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        self.install()
        return self

    def install(self) -> None:
        """Take over SIGINT and SIGTERM (again after ray.init, which installs its own SIGTERM handler); on
        exit the handlers in place before the last install come back."""
        import signal

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous = signal.signal(sig, self._handle)
                if previous != self._handle:
                    self._previous[sig] = previous

    def __exit__(self, *exc) -> None:
        import signal

        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum, _frame) -> None:
        self.seen = True
        if not self.in_rounds or self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum


# seconds a stop request waits for each round in flight before abandoning it
ROUND_GRACE_SECONDS = 5.0


def await_round(ref, stop: StopSignals):
    """The round's metrics, or None if a stop request came and the round did not end within the grace time."""
    from orchestrator.driver.local_coordinator import get, ready

    while not ready(ref, timeout=0.25):
        if stop.signum is not None:
            if not ready(ref, timeout=ROUND_GRACE_SECONDS):
                return None
            break
    return get(ref)
