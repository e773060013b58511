"""`KeptWrites`: the writes of ending turns (`ledger_put`, `ledger_done`, `ledger_attempted`,
`journal_close`) a store did not take during an outage, kept in memory, in order, until it
answers again (bot/store/outage.py says when).

Once one is kept, the next ones queue behind it: the order is what makes replaying them right (a
`ledger_put` then its `ledger_done`). They are bounded (`KEEP_LIMIT`; the oldest goes, with an
ERROR line). One writer at a time takes them from the front, and each is an upsert or a delete by
id, so none is written twice. Reads of the ledger and the journal are answered with what is kept
applied (`ledger_view`, `closed_turns`), as if the kept writes had been made.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, replace
from typing import Literal

import anyio

from bot.store.errors import LeaseLost, StoreError, StoreUnavailable
from bot.store.protocols import DeliveryStore
from bot.store.records import DeliveryEntry

__all__ = ["KEEP_LIMIT", "KeptWrite", "KeptWrites"]

log = logging.getLogger(__name__)

KEEP_LIMIT = 10_000  # ledger writes kept while the store is away; past it the oldest is dropped

_Kind = Literal["ledger_put", "ledger_done", "ledger_attempted", "journal_close"]


@dataclass(frozen=True, slots=True)
class KeptWrite:
    """One write of a turn that is ending, not yet in the store."""

    kind: _Kind
    entry_id: str = ""
    entry: DeliveryEntry | None = None
    turn_id: str = ""  # journal_close's turn, or the turn a ledger_put closes ("" for none)

    async def apply(self, store: DeliveryStore) -> None:
        if self.kind == "ledger_put":
            assert self.entry is not None
            await store.ledger_put(self.entry, closes_turn=self.turn_id or None)
        elif self.kind == "ledger_done":
            await store.ledger_done(self.entry_id)
        elif self.kind == "ledger_attempted":
            await store.ledger_attempted(self.entry_id)
        else:
            await store.journal_close(self.turn_id)

    def describe(self) -> str:
        return f"{self.kind} {self.entry_id or self.turn_id}"


class KeptWrites:
    """The ending writes `store` has not taken yet, oldest first."""

    def __init__(self, store: DeliveryStore) -> None:
        self._store = store
        self._writes: deque[KeptWrite] = deque()
        self._flushing = False
        self._kept_now: anyio.Event | None = None  # made in the event loop, by `wait_for_some`

    def __len__(self) -> int:
        return len(self._writes)

    async def write(self, write: KeptWrite) -> None:
        """Made now if the store answers and nothing is kept before it, else kept."""
        if not self._writes:
            try:
                await write.apply(self._store)
            except StoreUnavailable as exc:
                log.warning(
                    "the state store is unavailable (%s); keeping the turn's ledger writes"
                    " until it answers",
                    exc.reason,
                )
            else:
                return
        self._keep(write)

    def _keep(self, write: KeptWrite) -> None:
        if len(self._writes) >= KEEP_LIMIT:
            lost = self._writes.popleft()
            log.error(
                "the state store has been unavailable too long: %d ledger writes are kept,"
                " the oldest (%s) is dropped",
                KEEP_LIMIT,
                lost.describe(),
            )
        self._writes.append(write)
        if self._kept_now is not None:
            self._kept_now.set()

    async def wait_for_some(self) -> None:
        """Return once something is kept."""
        self._kept_now = anyio.Event()
        if not self._writes:
            await self._kept_now.wait()

    async def flush_unless_busy(self) -> None:
        """The store answered: write what is kept now, unless someone already is."""
        if self._writes and not self._flushing:
            await self.flush()

    async def flush(self) -> bool:
        """Write what is kept, oldest first, until the store stops answering; True when all of
        it is written. One writer at a time, so nothing is written twice."""
        if self._flushing:
            return False
        self._flushing = True
        written = 0
        try:
            while self._writes:
                write = self._writes[0]
                # Shielded with the pop: a write made but still kept would be made again.
                with anyio.CancelScope(shield=True):
                    try:
                        await write.apply(self._store)
                    except StoreUnavailable:
                        return False
                    except LeaseLost as exc:  # another replica took the conversation meanwhile
                        log.warning(
                            "a kept ledger write (%s) was refused: %s", write.describe(), exc
                        )
                        if write.kind == "ledger_put" and write.turn_id:
                            # the reply was delivered: its turn must not read as cut off
                            await self._close_quietly(write.turn_id)
                    except StoreError as exc:  # the store answered no: this write cannot be made
                        log.error("a kept ledger write (%s) failed: %s", write.describe(), exc)
                    if self._writes and self._writes[0] is write:  # not dropped for room meanwhile
                        self._writes.popleft()
                written += 1
            return True
        finally:
            self._flushing = False
            if written:
                log.warning("the state store answers again: %d kept ledger writes made", written)

    async def _close_quietly(self, turn_id: str) -> None:
        try:
            await self._store.journal_close(turn_id)
        except StoreError as exc:
            log.warning("could not close turn %s: %s", turn_id, exc.reason)

    async def last_try(self) -> None:
        """At shutdown: one more flush; what is still kept is named in an ERROR line (the
        store never answered again)."""
        if self._writes:
            await self.flush()
        if self._writes:
            log.error(
                "the state store did not answer again before shutdown: %d kept ledger"
                " writes are lost (%s)",
                len(self._writes),
                ", ".join(write.describe() for write in list(self._writes)[:20]),
            )

    def snapshot(self) -> list[KeptWrite]:
        """What is kept now: taken before a read of the store, it is what the read cannot
        have seen yet."""
        return list(self._writes)

    @staticmethod
    def ledger_view(stored: list[DeliveryEntry], kept: list[KeptWrite]) -> list[DeliveryEntry]:
        """The undelivered entries the store read, with the `kept` writes applied."""
        entries = {entry.entry_id: entry for entry in stored}
        for write in kept:
            if write.kind == "ledger_put" and write.entry is not None:
                entries[write.entry_id] = write.entry
            elif write.kind == "ledger_done":
                entries.pop(write.entry_id, None)
            elif write.kind == "ledger_attempted" and write.entry_id in entries:
                old = entries[write.entry_id]
                entries[write.entry_id] = replace(old, attempts=old.attempts + 1)
        return sorted(entries.values(), key=lambda entry: entry.created)

    def closed_turns(self) -> set[str]:
        """The turns a kept write closes."""
        return {write.turn_id for write in self._writes if write.turn_id}
