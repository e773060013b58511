"""The kit's live reply (`surfaces.base.LiveReply`) built on a surface's `send` and `edit`: each
part of the reply is one message, sent once and then edited as it grows; the final edit renders
it and takes its buttons off. Any surface can hand it out from `open_live`; one that cannot edit
(`capabilities.can_edit` false) shows nothing live and sends the final parts as new messages.

It keeps what each of its messages shows (`Shown`), so a call that would change nothing is never
made, and a message's buttons change only when they change. Every call passes the chat's pacer
once (`ChatPacer.call`; live updates as optional calls, which a Telegram group's window may hold
back) and is shielded from cancellation, bounded (`one_call`), so that after a cancelled turn
what it believes a message shows is still true. Where the surface's `send`/`edit` pass the pacer
themselves (`surface_paces`), the kit does not pass it again; a surface whose message calls can
tell optional ones apart subclasses it and overrides `_send`/`_edit` instead (Telegram)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass

import anyio

from surfaces.base import (
    BLANK,
    STATUS_MARK,
    Choice,
    ConversationKey,
    LivePart,
    MessageRef,
    Surface,
)
from surfaces.errors import MessageGone, PartFailed, SendFailed, SurfaceError

__all__ = ["CALL_TIMEOUT", "EditedLive", "Shown", "did_not_answer", "laid_out", "one_call"]

CALL_TIMEOUT = 10.0  # seconds: longer than any platform SDK's own request timeout


def one_call() -> anyio.CancelScope:
    """The scope of one platform call: shielded from cancellation, so that we learn what the
    platform now shows, yet bounded, so that a call that never answers cannot hold a shutdown.
    Check `cancelled_caught` after it: the platform did not answer in time."""
    return anyio.move_on_after(CALL_TIMEOUT, shield=True)


def did_not_answer() -> SendFailed:
    return SendFailed("the platform did not answer in time", transient=True)


def laid_out(
    parts: Sequence[LivePart], status: str | None, max_chars: int, count: Callable[[str], int]
) -> list[LivePart]:
    """The messages that show `parts` with the status block: its own paragraph at the end of the
    last part, marked with STATUS_MARK (so a surface that cannot take back what it showed, a
    terminal, can tell it from the answer), or a message of its own where that would not fit."""
    if not status:
        return list(parts)
    block = STATUS_MARK + status
    while count(block) > max_chars and len(block) > 1:  # only with a tiny limit
        block = block[: max(1, len(block) * max_chars // count(block) - 1)]
    if parts and not parts[-1].final:
        joined = f"{parts[-1].text}\n\n{block}"
        if count(joined) <= max_chars:
            return [*parts[:-1], LivePart(joined)]
    return [*parts, LivePart(block)]


@dataclass(slots=True)
class Shown:
    """One message of a live reply and what it shows."""

    ref: MessageRef | None = None  # None: not sent yet, or gone and to be sent again
    text: str = ""
    # Shown in final form (rendered): a live message always gets its final edit, even with the
    # same text, because that edit is how a surface learns the reply ended.
    final: bool = False
    buttons: tuple[Choice, ...] = ()

    def shows(self, text: str, *, final: bool, buttons: tuple[Choice, ...] = ()) -> bool:
        return (
            self.ref is not None
            and self.text == text
            and (self.final or not final)
            and self.buttons == buttons
        )


class EditedLive:
    """The kit's `LiveReply`: one message per part, sent, then edited (see the module)."""

    def __init__(
        self, surface: Surface, key: ConversationKey, *, surface_paces: bool = False
    ) -> None:
        self._surface = surface
        self._key = key
        self._caps = surface.capabilities
        self._pacer = self._caps.pacing.for_chat(key.chat)
        self._surface_paces = surface_paces
        self._messages: list[Shown] = []
        self._live = self._caps.can_edit  # off once finished

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
        wanted = laid_out(parts, status, self._caps.max_chars, self._caps.count)
        carried = tuple(buttons) if self._caps.message_buttons else ()
        for index, part in enumerate(wanted):
            # The live reply's buttons go on its last message, never on final text.
            on_it = carried if index == len(wanted) - 1 and not part.final else ()
            if not self._at(index).shows(part.text, final=part.final, buttons=on_it):
                await self._put(index, part.text, final=part.final, buttons=on_it)
        return bool(wanted)

    async def finish(self, parts: Sequence[str], *, skip: Collection[int] = ()) -> None:
        self._live = False
        for index, text in enumerate(parts):
            if index not in skip and not self._at(index).shows(text, final=True):
                await self._finish_one(index, text, final=True)
        # Live messages the final no longer needs (the status line or a tighter split made it
        # shorter).
        for index in range(len(parts), len(self._messages)):
            message = self._messages[index]
            if (
                index not in skip
                and message.ref is not None
                and not message.shows(BLANK, final=False)
            ):
                await self._finish_one(index, BLANK, final=False)

    async def _finish_one(self, index: int, text: str, *, final: bool) -> None:
        try:
            await self._put(index, text, final=final, buttons=())
        except SurfaceError as exc:
            raise PartFailed(index, exc) from exc

    def _at(self, index: int) -> Shown:
        while len(self._messages) <= index:
            self._messages.append(Shown())
        return self._messages[index]

    async def _put(
        self, index: int, text: str, *, final: bool, buttons: tuple[Choice, ...]
    ) -> None:
        """One call: edit message `index` if it was sent, else send it."""
        message = self._at(index)
        optional = self._live and not final  # a live update the chat can do without
        try:
            if message.ref is None:
                message.ref = await self._send(
                    text, final=final, buttons=buttons, optional=optional
                )
            else:
                await self._edit(message.ref, text, final=final, buttons=buttons, optional=optional)
        except MessageGone:
            message.ref, message.text = None, ""  # deleted or too old: sent anew next time
            raise
        message.text, message.final, message.buttons = text, final, buttons

    # -- the platform calls: overridden by a surface whose message calls take `optional` ------

    def _gate(self, optional: bool) -> AbstractAsyncContextManager[object]:
        """The chat's pacer, passed once per call: here, or in the surface's send and edit."""
        return nullcontext() if self._surface_paces else self._pacer.call(optional=optional)

    async def _send(
        self, text: str, *, final: bool, buttons: tuple[Choice, ...], optional: bool
    ) -> MessageRef:
        # `buttons` only where the surface takes them, and then on every call, so that a call
        # without them takes them off.
        extra = {"buttons": buttons} if self._caps.message_buttons else {}
        ref: MessageRef | None = None
        async with self._gate(optional):
            with one_call() as call:
                ref = await self._surface.send(self._key, text, formatted=final, **extra)
        if call.cancelled_caught or ref is None:
            raise did_not_answer()
        return ref

    async def _edit(
        self,
        ref: MessageRef,
        text: str,
        *,
        final: bool,
        buttons: tuple[Choice, ...],
        optional: bool,
    ) -> None:
        extra = {"buttons": buttons} if self._caps.message_buttons else {}
        async with self._gate(optional):
            with one_call() as call:
                await self._surface.edit(ref, text, formatted=final, **extra)
        if call.cancelled_caught:
            raise did_not_answer()
