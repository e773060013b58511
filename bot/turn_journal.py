"""A conversation's entries in the store's turn journal: a message waiting behind a running turn
(its event, so whoever adopts the journal after a crash sends it on), and the running turn (so a
restart after the process died mid-turn can tell the person; the app does so at start-up)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio

from bot.cluster import encode_event
from bot.faults import report_store_full
from bot.services import ConversationServices
from bot.store import JournalEntry, StoreError, StoreFull
from surfaces.base import ConversationKey, Inbound, UserRef

log = logging.getLogger(__name__)

# A turn cut off by a restart is reported when its surface next runs; after a week unseen, the
# notice would only confuse, so the journal entry expires.
JOURNAL_TTL = 7 * 24 * 3600.0


class TurnJournal:
    """The journal entries of one conversation."""

    def __init__(self, services: ConversationServices, key: ConversationKey) -> None:
        self.services = services
        self.key = key

    async def waiting(self, inbound: Inbound) -> str:
        """Journal a message that waits behind the running turn; returns its entry's id."""
        entry = JournalEntry(
            f"q-{uuid.uuid4().hex[:16]}",
            self.key,
            inbound.user.id,
            time.time(),
            self.services.replica,
            encode_event(inbound, 0),
        )
        await self.services.store.journal_open(entry, JOURNAL_TTL)
        return entry.turn_id

    async def close(self, ids: Sequence[str]) -> None:
        """Close the entries of waiting messages now taken (or dropped)."""
        for journal_id in ids:
            try:
                await self.services.store.journal_close(journal_id)
            except StoreError as exc:  # it is sent on after a crash; one duplicate at worst
                log.warning("%s: could not close journal entry %s: %s", self.key, journal_id, exc)

    @asynccontextmanager
    async def turn(self, turn_id: str, requester: UserRef) -> AsyncIterator[None]:
        """The turn is in the journal while it runs. Its final text normally closes it
        (`finish_reply(turn_id=...)`); closing again here covers a turn that ended without one,
        which no restart should report as cut off."""
        entry = JournalEntry(turn_id, self.key, requester.id, time.time(), self.services.replica)
        await self.services.store.journal_open(entry, JOURNAL_TTL)
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):  # bounded by the store's busy timeout
                try:
                    await self.services.store.journal_close(turn_id)
                except StoreFull as exc:  # the turn is told or answered; no room to record it
                    report_store_full(exc, "closing a turn")
