"""How the Discord surface spends Discord's global budget (about 50 requests a second for the
whole bot, shared by every chat; 429s count toward a temporary ban): when it is what limits, on
what the person needs first.

- **New messages** come first: the first text a person sees is one, and every message of a reply
  has to be created once, whatever else happens.
- **The final text** comes next: the edits that give each message of a reply its finished,
  rendered text (and blank the live messages the final no longer needs).
- **Live edits** (the text growing while the agent writes) take a slot only when one is free at
  once. Otherwise they are declined with a `RateLimited` that is already recorded, so no pacer
  holds the chat back for it: the reply stream keeps that text as not shown and folds it, with
  whatever arrived meanwhile, into its next turn. A busy budget thus thins out each chat's
  intermediate edits instead of queueing stale ones ahead of other chats' final text.
- A final edit that would show exactly what the message already shows is skipped while the
  budget is busy; with a slot free it is made, as it always was.

What each message shows is remembered for the last `SHOWN_MEMORY` messages the bot posted or
edited, so the memory stays bounded however many chats the bot meets."""

from __future__ import annotations

from surfaces.errors import RateLimited
from surfaces.pacing import GlobalBudget
from surfaces.text import ELLIPSIS

__all__ = ["EDIT", "FINAL_EDIT", "NEW_MESSAGE", "SHOWN_MEMORY", "Spending"]

NEW_MESSAGE, FINAL_EDIT, EDIT = 0, 1, 2  # the global budget's priorities, most urgent first
SHOWN_MEMORY = 4096  # messages whose text is remembered


class Spending:
    """The surface's `GlobalBudget`, spent by the rules above; `shown` is told what each call
    that succeeded made a message show."""

    def __init__(self, rate: float) -> None:
        self.budget = GlobalBudget(rate)
        self._shown: dict[int, str] = {}  # message id -> its text, oldest first

    async def new_message(self) -> None:
        """Wait for a slot for a call that creates a message (or opens a thread, or closes an
        approval: as urgent as a new message)."""
        await self.budget.take(NEW_MESSAGE)

    async def edit(self, message_id: int, content: str, *, final: bool) -> bool:
        """Wait for (or take) a slot for editing `message_id` to `content`: True when the call is
        to be made, False when it need not be (a final edit changing nothing while the budget is
        busy). Raises RateLimited, already recorded, for a live edit finding no free slot."""
        if not final and content != ELLIPSIS:  # blanking a message is part of the final state
            if self.budget.take_if_free():
                return True
            declined = RateLimited(0.0)
            declined.recorded = True  # our own budget's, not Discord's: nothing to wait out
            raise declined
        if self._shown.get(message_id) == content:
            return self.budget.take_if_free()  # made only when it costs nobody a slot
        await self.budget.take(FINAL_EDIT)
        return True

    def take_if_free(self) -> bool:
        """A slot for a call worth making only when one is free at once (typing)."""
        return self.budget.take_if_free()

    def shown(self, message_id: int, content: str) -> None:
        self._shown.pop(message_id, None)  # re-inserted as the newest
        self._shown[message_id] = content
        if len(self._shown) > SHOWN_MEMORY:
            del self._shown[next(iter(self._shown))]
