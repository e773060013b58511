"""A shared store's outage (issue 16, "Redis unavailable"): `OutageTolerantStore` wraps any
`StateStore` so that a store which cannot be reached for a while does not break conversations.

- Every call that fails with `StoreUnavailable` is tried again with backoff (by `stamina`) for at
  most `wait` seconds (`SWITCHBOARD_STATE_WAIT`), then `StoreUnavailable` is raised: a new event
  waits, then is answered with one sentence (bot/faults.py). A try that is under way when the
  time is up still finishes, so the bound is `wait` plus a backoff's last delay (`MAX_DELAY`)
  plus one call's own timeout.
- The writes that end a turn (`ledger_put`, `ledger_done`, `ledger_attempted`, `journal_close`)
  never fail the reply: when the store does not answer they are kept (bot/store/kept_writes.py)
  and written when it answers again, so the final reply is delivered now and reaches the ledger
  later: by `run()` (a loop the app's task group may own, a `BackgroundWriter`) or by the next
  call the store answers, whichever comes first.
- `ledger_pending` and `journal_open_turns` read the store and then apply what is kept, so they
  answer as if the kept writes had been made.
- `check_writable` is tried once: /readyz reports the outage instead of waiting it out.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterable, Awaitable, Callable, Sequence
from typing import TypeVar

import anyio
import stamina

from bot.conversation import Binding, ConversationKey
from bot.store.errors import StoreUnavailable
from bot.store.kept_writes import KeptWrite, KeptWrites
from bot.store.protocols import StateStore
from bot.store.records import (
    ApprovalRecord,
    AuditRecord,
    DeliveryEntry,
    JournalEntry,
    SessionRecord,
)

__all__ = ["DEFAULT_STATE_WAIT", "OutageTolerantStore"]

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_STATE_WAIT = 10.0  # seconds an outage is waited out (SWITCHBOARD_STATE_WAIT's default)
FIRST_DELAY = 0.05  # seconds before the first retry; doubling, plus as much again at random
MAX_DELAY = 1.0  # seconds between retries at most


class OutageTolerantStore:
    """`StateStore` around `inner` that waits out an outage of up to `wait` seconds and keeps the
    writes of ending turns until the store answers (see the module's doc)."""

    def __init__(self, inner: StateStore, *, wait: float = DEFAULT_STATE_WAIT) -> None:
        self.inner = inner
        self.wait = wait
        self.location = inner.location
        self.kept_writes = KeptWrites(inner)

    @property
    def kept(self) -> int:
        """How many writes wait for the store to answer."""
        return len(self.kept_writes)

    # -- the outage policy ------------------------------------------------------------------

    async def _patiently(self, call: Callable[[], Awaitable[T]]) -> T:
        started = anyio.current_time()
        try:
            result = await call()
        except StoreUnavailable as exc:
            log.warning(
                "the state store is unavailable (%s); waiting up to %g s", exc.reason, self.wait
            )
            result = await self._waited_out(call, exc, self.wait - (anyio.current_time() - started))
        await self.kept_writes.flush_unless_busy()
        return result

    async def _waited_out(
        self, call: Callable[[], Awaitable[T]], first: StoreUnavailable, left: float
    ) -> T:
        """`call` tried again with backoff while the store is unavailable, for `left` more
        seconds (a retry may start up to `MAX_DELAY` before the end); then `StoreUnavailable`
        saying how long it waited. Only the first try, by `_patiently`, is outside stamina: a
        store that answers costs no retry machinery."""
        try:
            if left <= 0:
                raise first
            async for attempt in _backoff(timeout=left):
                with attempt:
                    return await call()
        except StoreUnavailable as exc:
            raise StoreUnavailable(exc.location, f"{exc.reason} (waited {self.wait:g} s)") from exc
        raise AssertionError("stamina ends its attempts by returning or raising")

    async def run(self) -> None:
        """Write kept writes whenever there are some, retrying with backoff; runs until
        cancelled. Optional: without it they are written by the next call the store answers."""
        while True:
            await self.kept_writes.wait_for_some()
            try:
                async for attempt in _backoff(timeout=None):
                    with attempt:
                        await self._flush_all()
            except StoreUnavailable:
                # Only stamina's test mode gives up (it bounds the attempts): wait a little
                # rather than spin while the store stays away.
                await anyio.sleep(MAX_DELAY)

    async def _flush_all(self) -> None:
        if not await self.kept_writes.flush():
            raise StoreUnavailable(self.location, "kept ledger writes wait for the store")

    # -- bindings, places, settings, de-duplication, approvals ------------------------------

    async def get_binding(self, key: ConversationKey) -> Binding | None:
        return await self._patiently(lambda: self.inner.get_binding(key))

    async def put_binding(self, key: ConversationKey, binding: Binding) -> None:
        await self._patiently(lambda: self.inner.put_binding(key, binding))

    async def delete_binding(self, key: ConversationKey) -> None:
        await self._patiently(lambda: self.inner.delete_binding(key))

    async def get_place(self, place: ConversationKey) -> str | None:
        return await self._patiently(lambda: self.inner.get_place(place))

    async def put_place(self, place: ConversationKey, project: str) -> None:
        await self._patiently(lambda: self.inner.put_place(place, project))

    async def delete_place(self, place: ConversationKey) -> None:
        await self._patiently(lambda: self.inner.delete_place(place))

    async def conversation_setting(self, key: ConversationKey, name: str) -> str | None:
        return await self._patiently(lambda: self.inner.conversation_setting(key, name))

    async def set_conversation_setting(
        self, key: ConversationKey, name: str, value: str | None
    ) -> None:
        await self._patiently(lambda: self.inner.set_conversation_setting(key, name, value))

    async def claim_event(self, event_key: str, ttl: float, *, claimant: str = "") -> bool:
        # One claimant for every try: a try that reached the store but whose answer was lost is
        # won by the retry, not taken for a redelivery (which would drop the message).
        claimant = claimant or uuid.uuid4().hex
        return await self._patiently(
            lambda: self.inner.claim_event(event_key, ttl, claimant=claimant)
        )

    async def put_approvals(self, records: Sequence[ApprovalRecord], ttl: float) -> None:
        await self._patiently(lambda: self.inner.put_approvals(records, ttl))

    async def take_approval(self, token: str) -> ApprovalRecord | None:
        return await self._patiently(lambda: self.inner.take_approval(token))

    async def drop_approvals(self, group: str) -> None:
        await self._patiently(lambda: self.inner.drop_approvals(group))

    async def approval_shown(self, group: str, message: str) -> None:
        await self._patiently(lambda: self.inner.approval_shown(group, message))

    async def approvals_pending(self) -> list[ApprovalRecord]:
        return await self._patiently(self.inner.approvals_pending)

    # -- the delivery ledger and the turn journal -------------------------------------------

    async def ledger_put(self, entry: DeliveryEntry, *, closes_turn: str | None = None) -> None:
        await self.kept_writes.write(
            KeptWrite("ledger_put", entry.entry_id, entry, closes_turn or "")
        )

    async def ledger_done(self, entry_id: str) -> None:
        await self.kept_writes.write(KeptWrite("ledger_done", entry_id))

    async def ledger_attempted(self, entry_id: str) -> None:
        await self.kept_writes.write(KeptWrite("ledger_attempted", entry_id))

    async def journal_close(self, turn_id: str) -> None:
        await self.kept_writes.write(KeptWrite("journal_close", turn_id=turn_id))

    async def ledger_pending(self) -> list[DeliveryEntry]:
        kept = self.kept_writes.snapshot()  # before the read: the writes it cannot have seen yet
        stored = await self._patiently(self.inner.ledger_pending)
        return KeptWrites.ledger_view(stored, kept)

    async def journal_open(self, entry: JournalEntry, ttl: float) -> None:
        await self._patiently(lambda: self.inner.journal_open(entry, ttl))

    async def journal_open_turns(self) -> list[JournalEntry]:
        closed = self.kept_writes.closed_turns()
        turns = await self._patiently(self.inner.journal_open_turns)
        return [turn for turn in turns if turn.turn_id not in closed]

    # -- a conversation's agent sessions, the audit log ---------------------------------------

    async def history_record(self, key: ConversationKey, record: SessionRecord) -> None:
        await self._patiently(lambda: self.inner.history_record(key, record))

    async def history_title(self, session_id: str, title: str) -> None:
        await self._patiently(lambda: self.inner.history_title(session_id, title))

    async def history_of(self, key: ConversationKey, project: str) -> list[SessionRecord]:
        return await self._patiently(lambda: self.inner.history_of(key, project))

    async def history_owners(self, session_id: str) -> list[ConversationKey]:
        return await self._patiently(lambda: self.inner.history_owners(session_id))

    async def audit_put(self, record: AuditRecord, keep: float) -> None:
        await self._patiently(lambda: self.inner.audit_put(record, keep))

    async def audit_since(self, since: float) -> list[AuditRecord]:
        return await self._patiently(lambda: self.inner.audit_since(since))

    async def audit_latest(self, limit: int) -> list[AuditRecord]:
        return await self._patiently(lambda: self.inner.audit_latest(limit))

    # -- health and shutdown ----------------------------------------------------------------

    async def check_writable(self) -> None:
        await self.inner.check_writable()
        await self.kept_writes.flush_unless_busy()

    async def aclose(self) -> None:
        """One last try to write what is kept, then the store closes; what could not be
        written is named in an ERROR line (the store never answered again)."""
        with anyio.CancelScope(shield=True):
            await self.kept_writes.last_try()
            await self.inner.aclose()


def _backoff(*, timeout: float | None) -> AsyncIterable[stamina.Attempt]:
    """stamina's attempts at a call that meets `StoreUnavailable`: doubling delays from
    `FIRST_DELAY` to `MAX_DELAY`, for `timeout` seconds (None: until it answers). Its test mode
    (`stamina.set_testing`) makes them immediate and few."""
    return stamina.retry_context(
        on=StoreUnavailable,
        attempts=None,
        timeout=timeout,
        wait_initial=FIRST_DELAY,
        wait_max=MAX_DELAY,
        wait_jitter=FIRST_DELAY,
    )
