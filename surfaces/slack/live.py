"""Slack's live reply (`surfaces.base.LiveReply`): each part of the reply is one message, streamed
natively where Slack lets us and posted + updated where not (`streams.py`, which also stops the
streams that go quiet). Each message's `Posted` record is the one place that says what it shows,
so a put that would change nothing is never made, and its buttons change only when they change.

Pacing: every Web API call passes the channel's pacer once, inside `WebApi.shielded` (the wait
there may be cancelled, the call itself is shielded and bounded)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from surfaces.base import BLANK, Choice, ConversationKey, LivePart, SurfaceCapabilities
from surfaces.errors import PartFailed, SurfaceError
from surfaces.live import laid_out
from surfaces.slack.streams import NativeStreams, Posted

__all__ = ["SlackLive"]


class SlackLive:
    """One reply's messages in one conversation (see the module)."""

    def __init__(
        self, streams: NativeStreams, key: ConversationKey, capabilities: SurfaceCapabilities
    ) -> None:
        self._streams = streams
        self._key = key
        self._caps = capabilities
        self._pacer = capabilities.pacing.for_chat(key.chat)
        self._messages: list[Posted] = []
        self._live = True  # off once finished

    async def ready(self) -> None:
        if self._live:
            await self._pacer.ready(optional=True)

    async def show(
        self,
        parts: Sequence[LivePart],
        status: str | None = None,
        buttons: Sequence[Choice] = (),
    ) -> bool:
        if not self._live:
            return False
        # The status is the last paragraph: a stream leaves it out (it cannot take it back).
        wanted = laid_out(parts, status, self._caps.max_chars, self._caps.count)
        for index, part in enumerate(wanted):
            # The live reply's buttons go on its last message, never on final text.
            on_it = tuple(buttons) if index == len(wanted) - 1 and not part.final else ()
            message = self._at(index)
            if not message.shows(part.text, final=part.final, buttons=on_it):
                await self._streams.put(
                    message, self._key, part.text, final=part.final, buttons=on_it
                )
        return bool(wanted)

    async def finish(self, parts: Sequence[str], *, skip: Collection[int] = ()) -> None:
        self._live = False
        for index, text in enumerate(parts):
            if index not in skip and not self._at(index).shows(text, final=True):
                await self._finish_one(index, text, final=True)
        # Live messages the final no longer needs (the status line or a tighter split made it
        # shorter): their streams stopped, their text a blank.
        for index in range(len(parts), len(self._messages)):
            message = self._messages[index]
            if (
                index not in skip
                and message.ts is not None
                and (message.streaming or not message.shows(BLANK, final=False))
            ):
                await self._finish_one(index, BLANK, final=False)

    async def _finish_one(self, index: int, text: str, *, final: bool) -> None:
        try:
            await self._streams.put(self._at(index), self._key, text, final=final, buttons=())
        except SurfaceError as exc:
            raise PartFailed(index, exc) from exc

    def _at(self, index: int) -> Posted:
        while len(self._messages) <= index:
            self._messages.append(Posted(self._key.chat))
        return self._messages[index]
