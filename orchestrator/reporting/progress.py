"""Progress a user can follow while waiting: rounds of a run, runs of a comparison.

On a terminal, a tqdm bar (done/total, rate, ETA, a short status). Anywhere else (a job log, CI, a redirected
run) one plain line per step, at most every `every` seconds (and always for the last step), so a log shows
life without flooding:

    rounds 7/20  global 84.2 %  personalized –  1.3 s/round  elapsed 0:09  ETA 0:17
"""
from __future__ import annotations

import sys
import time
from typing import TextIO


def clock(seconds: float) -> str:
    """0:07, 1:02:03: elapsed times and ETAs as a person reads them."""
    seconds = int(round(max(0.0, seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """`total` steps of `unit`, `initial` of them already done (a resumed run)."""

    def __init__(self, total: int, unit: str, initial: int = 0, stream: TextIO | None = None,
                 every: float = 5.0, enabled: bool = True, tty: bool | None = None):
        self.total, self.unit, self.done = total, unit, initial
        self.stream = stream or sys.stderr
        self.every = every
        self.enabled = enabled
        self.tty = self.stream.isatty() if tty is None else tty
        self._start = time.monotonic()
        self._first = initial
        self._last_line = float("-inf")
        self._bar = None
        if enabled and self.tty:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=unit, unit=unit.rstrip("s"), file=self.stream,
                             dynamic_ncols=True)

    def eta(self) -> float | None:
        """Seconds left at the pace of the steps done in this process; None before the first one."""
        steps = self.done - self._first
        if steps <= 0:
            return None
        return (time.monotonic() - self._start) / steps * (self.total - self.done)

    def line(self, status: str = "") -> str:
        eta = self.eta()
        return "  ".join(x for x in (f"{self.unit} {self.done}/{self.total}", status,
                                     f"elapsed {clock(time.monotonic() - self._start)}",
                                     f"ETA {clock(eta)}" if eta is not None else "") if x)

    def advance(self, n: int = 1, status: str = "") -> None:
        """`n` more steps done; `status` says what matters now (latest accuracy, the runs still going)."""
        self.done += n
        self.show(status, step=n)

    def show(self, status: str, step: int = 0) -> None:
        """Update the status without a step (on a terminal only: a log gets lines per step)."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.set_postfix_str(status, refresh=False)
            if step:
                self._bar.update(step)
            else:
                self._bar.refresh()
            return
        now = time.monotonic()
        if step and (now - self._last_line >= self.every or self.done >= self.total):
            self._last_line = now
            print(self.line(status), file=self.stream, flush=True)

    def write(self, text: str) -> None:
        """A line of its own (a finished run), above the bar on a terminal."""
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
