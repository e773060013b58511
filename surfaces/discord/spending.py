"""How the Discord surface spends Discord's global budget (about 50 requests a second for the
whole bot, shared by every chat; 429s count toward a temporary ban): when it is what limits, on
what the person needs first.

- **New messages** come first: a reply's first is the first text the person sees, and each
  message of the final text has to be created once whatever else happens.
- **Final edits** come next: those that give each live message its finished, rendered text (and
  blank the live messages the final no longer needs).
- **Live calls**, while the agent writes (edits that grow the text, and the messages the live
  text outgrows into), are worth a short wait for a slot but never a place in the queue: with
  other calls waiting they are declined with a `RateLimited` that is already recorded, so no
  pacer holds the chat back for it. The reply stream keeps that text as not shown and folds it,
  with whatever arrived meanwhile, into its next turn. A busy budget thus thins out each chat's
  intermediate calls instead of queueing stale ones ahead of other chats' answers.
- A final edit that would show exactly what the message already shows (the live reply knows:
  `unchanged`) is skipped while the budget is busy; with a slot free it is made, as it always was.

A reply's live messages after its first stay live calls after some of its parts were given their
final form: the reply stream finishes each part as soon as the text has grown past it, so a final
call no longer means the reply is over. What starts a reply is a person writing: `heard` makes the
bot's next message in that channel the first of a reply again. (A person writing while a reply
still streams therefore leaves the next reply's first message a live call: it waits for a free slot
rather than queueing, and the final delivers it in any case.)

Which chats have a reply's live messages on show is remembered for the latest `MEMORY` of them,
so the memory stays bounded however many chats the bot meets. What each message shows is the live
reply's to know (`live.py`), not the budget's."""

from __future__ import annotations

from surfaces.errors import RateLimited
from surfaces.pacing import GlobalBudget
from surfaces.text import ELLIPSIS

__all__ = ["EDIT", "FINAL", "MEMORY", "NEW_MESSAGE", "Spending"]

NEW_MESSAGE, FINAL, EDIT = 0, 1, 2  # the global budget's priorities, most urgent first
MEMORY = 4096  # chats whose live reply is remembered


class Spending:
    """The surface's `GlobalBudget`, spent by the rules above. `sent` is told of each message
    posted."""

    def __init__(self, rate: float) -> None:
        self.budget = GlobalBudget(rate)
        self._live: dict[
            int, None
        ] = {}  # channels where a reply has shown a live message, oldest first

    async def new_message(self, channel: int = 0, *, final: bool = True) -> None:
        """Wait for a slot for a call that creates a message in `channel` (or opens a thread, or
        closes an approval: as urgent as a new message). A live message after the first of its
        reply is a live call (see `edit` for what a declined one raises)."""
        if final or channel not in self._live:
            await self.budget.take(NEW_MESSAGE)
        elif not await self.budget.take_unless_queued(EDIT):
            raise _declined()

    async def edit(self, content: str, *, final: bool, unchanged: bool = False) -> bool:
        """Wait for (or take) a slot for editing a message to `content`: True when the call is
        to be made, False when it need not be (a final edit that changes nothing, `unchanged`,
        while the budget is busy). Raises RateLimited, already recorded, for a live edit
        declined."""
        if not final and content != ELLIPSIS:  # blanking a message is part of the final state
            if await self.budget.take_unless_queued(EDIT):
                return True
            raise _declined()
        if unchanged:
            return self.budget.take_if_free()  # made only when it costs nobody a slot
        await self.budget.take(FINAL)
        return True

    def take_if_free(self) -> bool:
        """A slot for a call worth making only when one is free at once (typing)."""
        return self.budget.take_if_free()

    def heard(self, channel: int) -> None:
        """A person wrote in `channel`: the bot's next message there starts a reply."""
        self._live.pop(channel, None)

    def sent(self, channel: int, *, final: bool) -> None:
        """A message was posted in `channel`: a live one makes the reply's next ones live calls."""
        if not final:
            self._live.pop(channel, None)  # re-inserted as the newest
            self._live[channel] = None
            if len(self._live) > MEMORY:
                del self._live[next(iter(self._live))]


def _declined() -> RateLimited:
    declined = RateLimited(0.0)
    declined.recorded = True  # our own budget's, not Discord's: nothing to wait out
    return declined
