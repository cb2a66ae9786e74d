"""The driver's end of the pipe to MLflow tracking's process: numbered calls sent from a thread of their own (a
stopped child, whose pipe is full, blocks that thread, not the run), and each answer waited for until its deadline,
STOP_GRACE_SECONDS at most once a stop signal has come; a child that does not answer in time or that ended is given
up, with the calls it never answered."""
from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

TIMEOUT_ENV = "MOORING_TRACKING_TIMEOUT"
DEFAULT_TIMEOUT_SECONDS = 60.0
# the first answers include MLflow's import and a new store's tables, which one process at a time makes (another
# run's making them is waited for): at least this long, whatever the timeout
SETUP_SECONDS = 120.0
SETUP_CALLS = frozenset({"__init__", "open", "start"})
# once a stop signal has come, an answer is waited for at most this long (a child that answers ends its run KILLED)
STOP_GRACE_SECONDS = 5.0

Call = tuple[str, tuple, dict]  # (a Tracker method's name, args, kwargs)


def answer_timeout() -> float:
    """MOORING_TRACKING_TIMEOUT's seconds (DEFAULT_TIMEOUT_SECONDS where unset); anything but a positive number is
    refused."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        from orchestrator.experiment.config import ConfigError

        raise ConfigError(f"{TIMEOUT_ENV}={raw}: the seconds an answer from MLflow tracking's process is waited for "
                          "must be a positive number")
    return seconds


class TrackerChannel:
    """Calls to the child and its answers, each within its deadline. An answer carries the child's Tracker state,
    handed to `on_state`; giving the child up hands why and the calls it never answered to `on_lost`, once."""

    def __init__(self, conn, timeout: float, stop_requested: Callable[[], bool],
                 on_state: Callable[[dict[str, Any]], None], on_lost: Callable[[str, list[Call]], None]):
        self.conn, self.timeout = conn, timeout
        self.stop_requested, self.on_state, self.on_lost = stop_requested, on_state, on_lost
        self.lost: str | None = None  # why the child was given up, once it was
        self.number = 0
        # messages sent and not answered yet: (number, deadline for its answer, call)
        self.unanswered: deque[tuple[int, float, Call]] = deque()
        self.hurry_since: float | None = None
        self.interrupted = False  # a wait for an answer was interrupted (Ctrl-C, a signal outside the rounds)
        self.outbox: queue.SimpleQueue = queue.SimpleQueue()
        self.sender = threading.Thread(target=self.send_loop, name="mooring-tracking-send", daemon=True)
        self.sender.start()

    def send_loop(self) -> None:
        """The sending thread: one message after another, as long as the child takes them."""
        while (data := self.outbox.get()) is not None:
            try:
                self.conn.send_bytes(data)
            except (OSError, ValueError):  # the child is gone; its unanswered calls are kept (`give_up`)
                return

    def post(self, name: str, args: tuple, kwargs: dict) -> int:
        """The call sent (pickled here, so that a bad argument fails in the caller); its number."""
        from multiprocessing.reduction import ForkingPickler

        self.number += 1
        data = ForkingPickler.dumps((self.number, name, args, kwargs))
        self.unanswered.append((self.number, time.monotonic() + self.patience(name), (name, args, kwargs)))
        self.outbox.put(data)
        return self.number

    def patience(self, name: str) -> float:
        return max(self.timeout, SETUP_SECONDS) if name in SETUP_CALLS else self.timeout

    def answer(self, number: int):
        """The value call `number` returned, once its answer is in; None where the child is given up first."""
        while self.lost is None:
            deadline = self.unanswered[0][1] if self.unanswered else time.monotonic()
            if self.hurrying():
                deadline = min(deadline, self.hurry_since + STOP_GRACE_SECONDS)
            wait = deadline - time.monotonic()
            if wait <= 0:
                self.give_up(self.overdue())
                return None
            try:
                ready = self.conn.poll(min(wait, 0.25))
            except OSError:
                ready = True  # read below: ends as the child's end
            except BaseException:
                self.interrupted = True
                raise
            if not ready:
                continue
            answer = self.receive()
            if answer is not None and answer[0] == number:
                _, value, error = answer
                if error is not None:
                    raise RuntimeError(f"MLflow tracking's process: {error}")
                return value
        return None

    def overdue(self) -> str:
        """Why the child is given up, its oldest unanswered call being overdue."""
        patience = self.patience(self.unanswered[0][2][0] if self.unanswered else "")
        if self.hurry_since is not None and STOP_GRACE_SECONDS < patience:
            return f"its process did not answer within {STOP_GRACE_SECONDS:g} s of the stop signal"
        return f"its process did not answer in {patience:g} s"

    def hurrying(self) -> bool:
        if self.hurry_since is None and (self.interrupted or self.stop_requested()):
            self.hurry_since = time.monotonic()
        return self.hurry_since is not None

    def receive(self) -> tuple[int, Any, str | None] | None:
        """One answer (the poll said one is there): the child's state it carries applied, the calls up to it
        answered; (number, value, error), or None where the child is gone."""
        try:
            number, value, state, error = self.conn.recv()
        except (EOFError, OSError):
            self.give_up("its process ended")
            return None
        except Exception as e:  # noqa: BLE001 - an answer torn by an interrupted read: the pipe is unusable
            self.give_up(f"its answer could not be read ({type(e).__name__})")
            return None
        except BaseException:  # interrupted part-way through an answer: the rest of it would be read as the next
            self.interrupted = True
            self.give_up("its answer was interrupted")
            raise
        while self.unanswered and self.unanswered[0][0] <= number:
            self.unanswered.popleft()
        self.on_state(state)
        return number, value, error

    def check_in(self) -> None:
        """Without waiting: the answers already there read, and the child given up if the oldest call it has not
        answered is past its deadline (a stopped child, found during the rounds)."""
        while self.lost is None and self.unanswered:
            try:
                ready = self.conn.poll(0)
            except OSError:
                ready = True  # read below: ends as the child's end
            if not ready:
                break
            self.receive()
        if self.lost is None and self.unanswered and time.monotonic() > self.unanswered[0][1]:
            self.give_up(self.overdue())

    def give_up(self, why: str) -> None:
        if self.lost is not None:
            return
        self.lost = why
        calls = [call for _, _, call in self.unanswered]
        self.unanswered.clear()
        self.on_lost(why, calls)

    def close(self, child_alive: bool) -> None:
        """No more calls: the sender ends once it has sent what was posted, and a child that takes no more of it
        (stopped, hung) is given up after an answer's wait; then the pipe is closed."""
        self.outbox.put(None)
        if child_alive:
            self.sender.join(timeout=STOP_GRACE_SECONDS if self.hurrying() else self.timeout)
            if self.sender.is_alive():  # stuck on a child that takes nothing
                self.give_up("its process took no more messages")
        self.sender.join(timeout=10)
        self.conn.close()
