"""`Delivery`: how a reply reaches a conversation, the final text guaranteed by the ledger.

A live reply is opened on the surface with its chat's pacer (`open_reply`); its final text is
written to the delivery ledger before it is sent and marked done once it got through
(`finish_reply`), so a restart re-sends what a crash cut off (bot/routing.py adopts it);
`deliver` is a whole message at once. Runners, intake and routing all reply through it."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bot.faults import report_store_full
from bot.reply import ReplyStream, open_reply
from bot.store import DeliveryEntry, StateStore, StoreFull
from config import valid_text
from surfaces.base import ConversationKey, Surface

__all__ = ["Delivery"]


class Delivery:
    def __init__(self, store: StateStore, replica: str) -> None:
        self._store = store
        self._replica = replica  # each ledger entry names the replica that wrote it

    @asynccontextmanager
    async def open_reply(
        self, surface: Surface, key: ConversationKey
    ) -> AsyncIterator[ReplyStream]:
        """A live reply in the conversation, paced with every other reply to the same chat."""
        pacer = surface.capabilities.pacing.for_chat(key.chat)  # the surface's own pacing
        with pacer.held():
            async with open_reply(surface, key, pacer) as reply:
                yield reply

    async def finish_reply(
        self, reply: ReplyStream, key: ConversationKey, text: str, *, turn_id: str | None = None
    ) -> None:
        """The final text always reaches the person: it is in the ledger until delivered, and
        a restart re-sends what a crash cut off. With `turn_id`, this text answers that journalled
        turn, which leaves the journal in the same store write."""
        text = valid_text(text)  # the last defence: every final text can be encoded
        entry = DeliveryEntry(uuid.uuid4().hex, key, text, time.time(), replica=self._replica)
        try:
            await self._store.ledger_put(entry, closes_turn=turn_id)
        except StoreFull as exc:  # no room to record it: the reply still goes out, unrecorded
            report_store_full(exc, "recording a reply")
            await reply.finish(text)
            return
        delivered = await reply.finish(text)
        try:
            if delivered:
                await self._store.ledger_done(entry.entry_id)
            else:
                await self._store.ledger_attempted(entry.entry_id)
        except StoreFull as exc:  # a restart re-sends it: one duplicate at worst
            report_store_full(exc, "recording a delivery")

    async def deliver(
        self, surface: Surface, key: ConversationKey, text: str, *, turn_id: str | None = None
    ) -> None:
        """A whole message at once: `open_reply`, then `finish_reply`."""
        async with self.open_reply(surface, key) as reply:
            await self.finish_reply(reply, key, text, turn_id=turn_id)
