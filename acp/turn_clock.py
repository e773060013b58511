"""A prompt turn's two limits and the one timer that wakes it at the earlier: the deadline
(the prompt timeout, moved on by the time spent with a person) and, once a cancel is sent, the
grace the agent gets to answer it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from acp.session_handle import SessionHandle

Alarm = Literal["timed out", "grace over"]


class TurnClock:
    __slots__ = ("_handle", "_timer", "_wake", "deadline", "grace_deadline", "timed_out")

    def __init__(self, handle: SessionHandle, wake: Callable[[], None]) -> None:
        self._handle = handle  # its timer task runs the timer
        self._wake = wake
        self._timer: int | None = None
        self.deadline: float | None = None
        self.grace_deadline: float | None = None
        self.timed_out = False

    def start(self, timeout: float | None) -> None:
        """The prompt is sent: the agent has `timeout` seconds (None: no limit)."""
        if timeout is not None:
            self.deadline = time.monotonic() + timeout
            self._arm(self.deadline)

    def pause(self, seconds: float) -> None:
        """`seconds` were spent with a person: not the agent's time."""
        if self.deadline is not None:
            self.deadline += seconds

    def grant_grace(self, seconds: float) -> None:
        """A cancel is sent: the agent has `seconds` to answer it (the shorter grace wins)."""
        limit = time.monotonic() + seconds
        if self.grace_deadline is None or limit < self.grace_deadline:
            self.grace_deadline = limit
            self._arm(limit)

    def woken(self) -> Alarm | None:
        """The timer fired: which limit passed (the deadline only once), else None and the
        timer set again for the earliest limit still ahead (the deadline may have moved on)."""
        now = time.monotonic()
        if self.grace_deadline is not None and now >= self.grace_deadline:
            return "grace over"
        deadline = None if self.timed_out else self.deadline
        if deadline is not None and now >= deadline:
            self.timed_out = True
            return "timed out"
        limits = [deadline] if deadline is not None else []
        if self.grace_deadline is not None:
            limits.append(self.grace_deadline)
        if limits:
            self._arm(min(limits))
        return None

    def stop(self) -> None:
        if self._timer is not None:
            self._handle.cancel_timer(self._timer)
            self._timer = None

    def _arm(self, when: float) -> None:
        self.stop()
        self._timer = self._handle.call_at(when, self._wake)
