"""A person's next message, awaited where the platform hands the bot only what is addressed to it.

In a Slack or Discord channel the adapters take a message only when it mentions the bot or sits
in a thread the bot is part of, so a typed answer to the agent's question ("your answer to
Name:") written as a plain message could never reach the bot. `ask_text` (the `AsksForText`
ability) therefore notes, for that conversation and that person only, that their next message is
wanted: the adapter takes it, mention or not, and the note is gone. One note per conversation
and person (asking again renews it), each for `wait` seconds (the bot's approval timeout, after
which the question is cancelled anyway), at most `LIMIT` kept; nobody else's message is ever
taken because of one."""

from __future__ import annotations

import time
from collections.abc import Callable

from surfaces.base import ConversationKey
from surfaces.bounded import BoundedMap

__all__ = ["LIMIT", "AwaitedReplies"]

LIMIT = 1000  # notes kept at once (the oldest forgotten: its question falls back to a mention)


class AwaitedReplies:
    """`expect(key, user)` after asking; `take(key, user)` for a message that arrived."""

    def __init__(
        self, wait: float, *, clock: Callable[[], float] = time.monotonic, limit: int = LIMIT
    ) -> None:
        self.wait = wait
        self._clock = clock
        self._until: BoundedMap[tuple[ConversationKey, str], float] = BoundedMap(limit)
        # (surface, chat, user) -> the conversation (a thread) noted last there
        self._latest: BoundedMap[tuple[str, str, str], ConversationKey] = BoundedMap(limit)

    def expect(self, key: ConversationKey, user: str) -> None:
        """`user`'s next message in `key` is wanted (for `wait` seconds from now)."""
        self._until.remember((key, user), self._clock() + self.wait)
        self._latest.remember((key.surface, key.chat, user), key)

    def take(self, key: ConversationKey, user: str) -> bool:
        """Whether this message of `user`'s in `key` was awaited; the note goes either way."""
        until = self._until.pop((key, user), None)
        if self._latest.get((key.surface, key.chat, user)) == key:
            del self._latest[(key.surface, key.chat, user)]
        return until is not None and self._clock() <= until

    def awaited_in(self, chat: ConversationKey, user: str) -> ConversationKey | None:
        """The conversation in `chat`'s channel (any thread of it) where `user`'s answer was
        noted last and is still awaited, or None. Nothing is taken."""
        key = self._latest.get((chat.surface, chat.chat, user))
        if key is None:
            return None
        until = self._until.get((key, user))
        return key if until is not None and self._clock() <= until else None

    def __len__(self) -> int:
        return len(self._until)
