"""Fault isolation: an unexpected exception (a bug or a foreign error nobody mapped, never one of
our own error types) ends only the turn or event it happened in. It is logged once at ERROR with
breadcrumbs to find it by (surface, conversation, turn id, agent pid, the methods of the last
frames) and the person is told in one sentence; the process and every other conversation go on.
A `StoreUnavailable` (the shared state store did not answer within SWITCHBOARD_STATE_WAIT) is no
bug: one WARNING line without a traceback, and a sentence asking to send the message again.
A `StoreFull` (the store's disk, or Redis' memory, is full) is no bug either, but nothing more can
be recorded until an operator makes room: the person is told their message did not reach the
agent, and the operator gets one ERROR line per `STORE_FULL_EVERY` seconds (the rest at debug,
counted in the next ERROR line), not one per message. A fault of the store is told without the
store (`told_without_store`): the delivery ledger, which the sentence would otherwise go through,
cannot be written either.

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
from bot.store import StoreError, StoreFull, StoreUnavailable
from surfaces.base import ConversationKey

log = logging.getLogger(__name__)

RECENT_FAULTS = 100
_CRUMB_MAX = 500  # one breadcrumb value, bounded
_STDERR_LINES = 20
STORE_FULL_EVERY = 60.0  # seconds between the ERROR lines of one full store


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


def store_full_sentence(exc: StoreFull) -> str:
    return (
        f"Switchboard cannot save its state right now ({exc.room}); "
        "your message was not sent to the agent."
    )


def told_without_store(exc: BaseException) -> bool:
    """Whether the sentence for `exc` must reach the person without the store: the store is
    what failed, so its delivery ledger may not take the sentence either."""
    return isinstance(_leaf(exc), StoreError)


class _StoreFullReports:
    """One ERROR line per full store per `STORE_FULL_EVERY` seconds; the faults between them are
    debug lines, counted in the next ERROR line."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._quiet: dict[str, int] = {}

    def report(self, exc: StoreFull, doing: str) -> None:
        now = time.monotonic()
        last = self._last.get(exc.location)
        if last is not None and now - last < STORE_FULL_EVERY:
            self._quiet[exc.location] = self._quiet.get(exc.location, 0) + 1
            log.debug("the state store is still full while %s: %s", doing, exc.reason)
            return
        self._last[exc.location] = now
        quiet = self._quiet.pop(exc.location, 0)
        log.error(
            "the state store at %s cannot be written (%s: %s) while %s; messages are refused"
            " until there is room%s",
            exc.location,
            exc.room,
            exc.reason,
            doing,
            f" ({quiet} more store faults since the last line)" if quiet else "",
        )


_store_full = _StoreFullReports()


def report_store_full(exc: StoreFull, doing: str) -> None:
    """Tell the operator that `exc`'s store is full (rate-limited, see the module's doc)."""
    _store_full.report(exc, doing)


def fault_sentence(exc: BaseException) -> str:
    leaf = _leaf(exc)
    if isinstance(leaf, StoreUnavailable):  # an outage, not a bug: nothing to look up
        return STORE_UNAVAILABLE
    if isinstance(leaf, StoreFull):
        return store_full_sentence(leaf)
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
    leaf = _leaf(exc)
    if isinstance(leaf, StoreFull):  # one ERROR line a minute, however many messages meet it
        report_store_full(leaf, f"{doing} [{trail}]")
    elif isinstance(leaf, StoreUnavailable):  # expected while Redis is away: no traceback
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
