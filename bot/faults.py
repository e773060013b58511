"""Fault isolation: an unexpected exception (a bug or a foreign error nobody mapped, never one of
our own error types) ends only the turn or event it happened in. It is logged once at ERROR with
breadcrumbs to find it by (surface, conversation, turn id, agent pid, the methods of the last
frames) and the person is told in one sentence; the process and every other conversation go on.
A `StoreUnavailable` (the shared state store did not answer within SWITCHBOARD_STATE_WAIT) is no
bug: one WARNING line without a traceback, and a sentence asking to send the message again.

The last `RECENT_FAULTS` faults are also kept in `recent_faults` (a bounded ring, redacted as the
log is) for the operations view: what the person was told, the error class, the breadcrumbs and
the agent's stderr tail."""

from __future__ import annotations

import logging
import secrets
import time
from collections import deque
from dataclasses import dataclass

from acp import AcpRuntime, redact
from bot.store import StoreUnavailable
from surfaces.base import ConversationKey

log = logging.getLogger(__name__)

RECENT_FAULTS = 100
_CRUMB_MAX = 500  # one breadcrumb value, bounded
_STDERR_LINES = 20


@dataclass(frozen=True, slots=True)
class FaultRecord:
    """One fault as the operations view shows it; every string already redacted and bounded."""

    at: float
    doing: str
    conversation: str
    error: str  # the class name
    told: str  # the sentence the person was told
    crumbs: dict[str, str]
    stderr_tail: str

    def as_json(self) -> dict[str, object]:
        return {
            "at": self.at,
            "doing": self.doing,
            "conversation": self.conversation,
            "error": self.error,
            "told": self.told,
            "crumbs": dict(self.crumbs),
            "stderr_tail": self.stderr_tail,
        }


def _bounded(text: str, limit: int = _CRUMB_MAX) -> str:
    text = redact(str(text))
    return text if len(text) <= limit else text[: limit - 1] + "…"


class RecentFaults:
    """The last `limit` faults, newest last."""

    def __init__(self, limit: int = RECENT_FAULTS) -> None:
        self._ring: deque[FaultRecord] = deque(maxlen=limit)

    def add(self, record: FaultRecord) -> None:
        self._ring.append(record)

    def latest(self) -> list[FaultRecord]:
        """Newest first."""
        return list(reversed(self._ring))

    def clear(self) -> None:
        self._ring.clear()


recent_faults = RecentFaults()


def new_turn_id() -> str:
    """Short enough to read out of a log line, random enough to be unique in one."""
    return secrets.token_hex(4)


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


STORE_UNAVAILABLE = (
    "Switchboard cannot reach its state store right now; send your message again in a minute."
)


def fault_sentence(exc: BaseException) -> str:
    leaf = _leaf(exc)
    if isinstance(leaf, StoreUnavailable):  # an outage, not a bug: nothing to look up
        return STORE_UNAVAILABLE
    name = type(leaf).__name__
    return (
        f"Something went wrong on Switchboard's side while answering ({name}); "
        "the details are in its log. Send your message again."
    )


def log_fault(
    exc: BaseException,
    doing: str,
    key: ConversationKey,
    runtime: AcpRuntime | None,
    **crumbs: str,
) -> None:
    """The one ERROR line (with the traceback) for a fault while `doing` something for `key`."""
    fields = {"surface": key.surface, "conversation": str(key), **crumbs}
    trail = " ".join(f"{name}={value}" for name, value in fields.items() if value)
    agent = runtime.breadcrumbs() if runtime is not None else "agent=none"
    if isinstance(_leaf(exc), StoreUnavailable):  # expected while Redis is away: no traceback
        log.warning(
            "the state store is unavailable while %s [%s %s]: %s", doing, trail, agent, _leaf(exc)
        )
    else:
        log.error("unexpected fault while %s [%s %s]", doing, trail, agent, exc_info=exc)
    tail = runtime.stderr.text(max_lines=_STDERR_LINES) if runtime is not None else ""
    recent_faults.add(
        FaultRecord(
            time.time(),
            _bounded(doing),
            _bounded(str(key)),
            type(_leaf(exc)).__name__,
            fault_sentence(exc),
            {name: _bounded(value) for name, value in (*crumbs.items(), ("agent", agent)) if value},
            _bounded(tail, 4000),
        )
    )
