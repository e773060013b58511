"""The surface-neutral reply stream: one reply (one turn) shown live and then delivered in full.

Everything platform-specific comes from `SurfaceCapabilities`: the length limit and how it is
counted, whether messages can be edited, and how often: the caller hands in the chat's
`ChatPacer`, which belongs to the surface's pacing (`surface.capabilities.pacing`, see
`surfaces.pacing`); this module only takes its turns and records the 429s no pacer recorded yet.

While the agent streams, the latest text is shown as plain, unrendered text (half-written Markdown
renders badly and some dialects reject it outright), coalesced to at most one operation per pacer
turn, with no-op edits skipped and new messages added as the text outgrows the limit. A part the
text has grown past for good (`settled_parts`: no text the agent adds can move its boundary) is
rendered and shown in its final form at once, and never touched again: one call instead of live ones
plus a final one, and the final calls spread over the reply rather than all at its end. `finish`
then renders the final text per part, sends only what is not already shown (a final text that does
not extend what streamed, e.g. a notice put before it, just re-delivers the parts that differ), and
makes sure it arrives: a 429 holds the whole chat back and is waited out, transient failures are
retried with backoff, a message that is gone is replaced by a new one. Leaving `open_reply` without
`finish` (an error, a cancelled turn) delivers the latest text, shielded and bounded, so partial
output is never lost."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio

from bot.markdown_split import settled_parts, split_message
from surfaces.base import STATUS_MARK, Choice, ConversationKey, MessageRef, Surface
from surfaces.errors import MessageGone, RateLimited, SendFailed, SurfaceError
from surfaces.pacing import ChatPacer

__all__ = ["ReplyStream", "open_reply", "split_message"]

log = logging.getLogger(__name__)

OPERATION_TIMEOUT = 10.0  # seconds: longer than any platform SDK's own request timeout

# What a live message the final text no longer needs is edited to: platforms refuse empty text and
# offer us no delete, and stale text repeated below the answer would confuse more than a dot.
_BLANK = "…"

# The status block's bounds: the agent decides what goes into it.
STATUS_LINES = 20
STATUS_CHARS = 1500


@dataclass(slots=True)
class _Message:
    ref: MessageRef | None = None  # None: not sent yet, or gone and to be sent again
    text: str = ""  # what the platform shows, so unchanged text is never sent twice
    # Whether it was last sent as final, rendered text: a live message always gets its final
    # edit, even with the same text, because that edit is how a surface learns the reply ended
    # (a native stream is stopped by it).
    formatted: bool = False
    buttons: bool = False  # it carries the live reply's buttons (the final edit takes them off)


class ReplyStream:
    """One reply, shown live and finished once. Made by `open_reply`, which runs its tasks."""

    def __init__(
        self,
        surface: Surface,
        key: ConversationKey,
        pacer: ChatPacer,
        *,
        max_attempts: int,
        retry_delay: float,
        typing_interval: float,
    ) -> None:
        self._surface = surface
        self._caps = surface.capabilities
        self._key = key
        self._pacer = pacer
        self._max_attempts = max(1, max_attempts)
        self._retry_delay = retry_delay
        self._typing_interval = typing_interval
        self._text = ""
        self._status: str | None = None
        self._buttons: tuple[Choice, ...] = ()
        self._button_index = -1  # the live message that carries them: the last one
        self._changed = anyio.Event()
        self._messages: list[_Message] = []
        # off for good after a live failure that won't heal
        self._live = self._caps.can_edit or self._caps.drafts
        self._live_scope = anyio.CancelScope()
        self._live_done = anyio.Event()
        self._typing_scope = anyio.CancelScope()
        self._final: str | None = None  # set by finish(); the exit path retries it if interrupted
        self._outcome: bool | None = None  # finish()'s result once it ran to the end
        self._split_cache: tuple[str, list[str]] = ("", [])
        # The leading source parts of the text that can no longer change, each with what it
        # renders to: shown in final form as soon as they settle (see _live_step).
        self._settled: list[tuple[str, list[str]]] = []
        self._settled_for = ""  # the text they were worked out for
        self._previewed = ""  # the draft last shown, on surfaces with drafts

    def update(self, text: str) -> None:
        """The whole reply so far (not a delta). Never blocks; the latest text wins."""
        if self._final is None:
            self._text = text
            self._changed.set()

    def set_status(self, text: str | None) -> None:
        """A short block under the live text (e.g. "running: ls -la", or a plan and the tools
        run so far), one line per line of `text`; never part of the final."""
        if self._final is None:
            self._status = _status_block(text) if text else None
            self._changed.set()

    def set_buttons(self, buttons: Sequence[Choice]) -> None:
        """Buttons the live message carries while the reply is live (a Stop button); the final
        edit takes them off. Ignored where `capabilities.message_buttons` is false."""
        if self._caps.message_buttons and self._final is None:
            self._buttons = tuple(buttons)
            self._changed.set()

    async def finish(self, text: str) -> bool:
        """Deliver the final text, rendered, and return whether every part arrived."""
        self._final = text
        self._live_scope.cancel()
        await self._live_done.wait()  # an edit in flight completes first; then it's ours alone
        parts = self._final_parts(text)
        delivered = True
        for index, part in enumerate(parts):
            if not self._shows(index, part, formatted=True):
                delivered = await self._deliver(index, part, formatted=True) and delivered
        # Live messages the final no longer needs (the status line or a tighter split made it
        # shorter): best effort, not counted, since the answer itself has arrived.
        for index in range(len(parts), len(self._messages)):
            if self._messages[index].ref is not None and not self._shows(index, _BLANK):
                await self._deliver(index, _BLANK)
        self._outcome = delivered
        return delivered

    # -- the final text --------------------------------------------------------------------------

    def _final_parts(self, text: str) -> list[str]:
        if not text.strip():
            return []  # platforms refuse empty messages
        parts: list[str] = []
        for source in split_message(text, self._caps.max_chars, self._caps.count):
            parts.extend(self._render(source, self._caps.max_chars))
        return parts

    def _render(self, source: str, budget: int) -> list[str]:
        """Render one part; if rendering grew it past the limit (escapes, tags), split its source
        tighter, in proportion to the growth, and render the pieces."""
        shown = self._surface.render(source)
        size = self._caps.count(shown)
        tighter = min(budget - 1, budget * self._caps.max_chars // max(size, 1))
        if size <= self._caps.max_chars or tighter < 1:
            return [shown]
        return [
            piece
            for smaller in split_message(source, tighter, self._caps.count)
            for piece in self._render(smaller, tighter)
        ]

    async def _deliver(self, index: int, text: str, *, formatted: bool = False) -> bool:
        for attempt in range(1, self._max_attempts + 1):
            await self._pacer.wait_turn()
            try:
                # Shielded like a live operation: a cancellation waits for the call in flight, so
                # we know whether the platform has the message and the exit path does not send
                # it twice.
                with _in_flight() as operation:
                    await self._put(index, text, formatted=formatted)
                if operation.cancelled_caught:
                    raise SendFailed("the platform did not answer in time", transient=True)
                return True
            except RateLimited as exc:
                self._pacer.record(exc)  # the next wait_turn waits it out
            except MessageGone:
                pass  # _put forgot the message; the next attempt sends a new one
            except SendFailed as exc:
                if not exc.transient:
                    log.warning(
                        "reply to %s: part %d not delivered: %s", self._key, index + 1, exc.reason
                    )
                    return False
                await anyio.sleep(self._retry_delay * 2 ** (attempt - 1))
        log.error(
            "reply to %s: gave up on part %d after %d attempts",
            self._key,
            index + 1,
            self._max_attempts,
        )
        return False

    # -- shared by live and final ----------------------------------------------------------------

    def _shows(self, index: int, text: str, *, formatted: bool = False) -> bool:
        if index >= len(self._messages):
            return False
        message = self._messages[index]
        if message.buttons != bool(self._buttons_for(index, formatted)):
            return False
        return message.text == text and (message.formatted or not formatted)

    def _buttons_for(self, index: int, formatted: bool) -> tuple[Choice, ...]:
        """The live reply's buttons go on its last live message, never on final text."""
        if formatted or self._final is not None or not self._buttons:
            return ()
        return self._buttons if index == self._button_index else ()

    async def _put(self, index: int, text: str, *, formatted: bool = False) -> None:
        """One operation: edit message `index` if it exists, else send it."""
        while len(self._messages) <= index:
            self._messages.append(_Message())
        message = self._messages[index]
        buttons = self._buttons_for(index, formatted)
        # Only passed where the surface takes them (set_buttons checks), and then always on an
        # edit, so an edit without them takes the button off.
        extra = {"buttons": buttons} if self._caps.message_buttons else {}
        if message.ref is None:
            message.ref = await self._surface.send(self._key, text, formatted=formatted, **extra)
            self._typing_scope.cancel()  # the platform clears the indicator on a message
        else:
            try:
                await self._surface.edit(message.ref, text, formatted=formatted, **extra)
            except MessageGone:
                message.ref, message.text = None, ""  # deleted or too old: send it anew
                raise
        message.text = text
        message.formatted = formatted
        message.buttons = bool(buttons)

    def _has_sent(self) -> bool:
        return any(message.ref is not None for message in self._messages)

    # -- background tasks, run by open_reply -----------------------------------------------------

    def _live_text(self) -> str:
        if not self._status:
            return self._text
        # The status is the last paragraph and starts with STATUS_MARK, so a surface that cannot
        # take back what it showed (a terminal) can tell it from the answer.
        status = STATUS_MARK + self._status
        return f"{self._text}\n\n{status}" if self._text.strip() else status

    def _live_step(self) -> tuple[int, str, bool] | None:
        """The first live operation needed to show the latest text, if any: (index, text,
        formatted)."""
        text = self._live_text()
        if not self._live or not text.strip():
            return None
        if self._split_cache[0] != text:
            self._split_cache = (text, split_message(text, self._caps.max_chars, self._caps.count))
        parts = self._split_cache[1]
        if self._caps.drafts:
            # One ephemeral bubble: preview the part being written; finish() sends them all.
            return (-1, parts[-1], False) if parts and parts[-1] != self._previewed else None
        # Parts the text has grown past are shown once, in their final form, and finish() finds
        # them done: each costs one call instead of live ones plus a final one, and the final
        # calls are spread over the reply instead of all waiting for its end. The status line
        # comes after the text, so it cannot move a settled part.
        settled = self._settle() if len(parts) > 1 else []  # the last part never settles
        if [source for source, _ in settled] != parts[: len(settled)]:
            settled = []  # never expected; the live split is then shown as it is
        shown_pieces = sum(len(pieces) for _, pieces in settled)
        self._button_index = shown_pieces + len(parts) - len(settled) - 1
        index = 0
        for _, pieces in settled:
            for piece in pieces:
                if not self._shows(index, piece, formatted=True):
                    return index, piece, True
                index += 1
        for part in parts[len(settled) :]:
            if not self._shows(index, part):
                return index, part, False
            index += 1
        return None

    def _settle(self) -> list[tuple[str, list[str]]]:
        if self._settled_for != self._text:
            sources = settled_parts(self._text, self._caps.max_chars, self._caps.count)
            known = self._settled
            for at, source in enumerate(sources):
                if at >= len(known) or known[at][0] != source:
                    known[at:] = [(source, self._render(source, self._caps.max_chars))]
            del known[len(sources) :]
            self._settled_for = self._text
        return self._settled

    async def _stream_live(self) -> None:
        try:
            with self._live_scope:
                while True:
                    if self._live_step() is None:
                        await self._changed.wait()
                        self._changed = anyio.Event()
                        continue
                    await self._pacer.wait_turn()
                    # Whatever arrived while we waited is coalesced into this one operation.
                    step = self._live_step()
                    if step is None or self._final is not None:
                        self._pacer.refund()  # finish() may need this turn right away
                        continue
                    # Shielded: finish() waits for an operation in flight rather than losing
                    # track of what the platform shows.
                    with _in_flight():
                        await self._try_live(*step)
        finally:
            self._live_done.set()

    async def _try_live(self, index: int, text: str, formatted: bool) -> None:
        try:
            if index < 0:
                if self._caps.message_buttons and self._buttons:
                    await self._surface.preview(self._key, text, buttons=self._buttons)
                else:
                    await self._surface.preview(self._key, text)
                self._previewed = text
                self._typing_scope.cancel()
            else:
                await self._put(index, text, formatted=formatted)
        except RateLimited as exc:
            self._pacer.record(exc)
        except MessageGone:
            pass  # sent anew on the next turn
        except SendFailed as exc:
            if not exc.transient:
                log.warning("reply to %s: live updates stopped: %s", self._key, exc.reason)
                self._live = False
        except Exception:
            # Live updates are a courtesy: a surface bug must not cost the turn. finish() still
            # delivers, and will report what goes wrong then.
            log.exception("reply to %s: live updates stopped", self._key)
            self._live = False

    async def _keep_typing(self) -> None:
        with self._typing_scope:
            while not self._has_sent():
                if not self._pacer.is_penalized():  # a 429 covers the whole chat
                    try:
                        await self._surface.typing(self._key)
                    except RateLimited as exc:
                        self._pacer.record(exc)
                    except SurfaceError as exc:
                        log.debug("reply to %s: typing failed: %s", self._key, exc)
                await anyio.sleep(self._typing_interval)

    async def _close(self) -> None:
        if self._outcome is None:
            await self.finish(self._final if self._final is not None else self._text)


def _status_block(text: str) -> str:
    """`text` as the status block: its non-blank lines, each whitespace-normalised, joined by
    single newlines (no blank line inside: the block is one paragraph), bounded."""
    lines = [" ".join(line.split()) for line in text.splitlines()]
    block = "\n".join([line for line in lines if line][:STATUS_LINES])
    return block[:STATUS_CHARS]


def _in_flight() -> anyio.CancelScope:
    """The scope of one platform call: shielded from cancellation, so that we learn what the
    platform now shows, yet bounded, so that a call that never answers cannot hold a shutdown."""
    return anyio.move_on_after(OPERATION_TIMEOUT, shield=True)


@asynccontextmanager
async def open_reply(
    surface: Surface,
    key: ConversationKey,
    pacer: ChatPacer,
    *,
    max_attempts: int = 5,
    retry_delay: float = 0.5,
    typing_interval: float = 4.0,
    close_timeout: float = 5.0,
) -> AsyncIterator[ReplyStream]:
    """A reply stream for one turn. Leaving the block without `finish()` delivers the latest text,
    even when cancelled: shielded, and bounded by `close_timeout` seconds."""
    reply = ReplyStream(
        surface,
        key,
        pacer,
        max_attempts=max_attempts,
        retry_delay=retry_delay,
        typing_interval=typing_interval,
    )
    failure: BaseException | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(reply._keep_typing)
        if surface.capabilities.can_edit or surface.capabilities.drafts:
            tg.start_soon(reply._stream_live)
        else:
            reply._live_done.set()  # nothing live to wait for
        try:
            yield reply
        except BaseException as exc:
            # Held until the task group is closed, so the caller gets its own exception back, not
            # an ExceptionGroup; cancellation included, and re-raised below.
            failure = exc
        finally:
            with anyio.move_on_after(close_timeout, shield=True) as closing:
                await reply._close()
            if closing.cancelled_caught:
                log.error("reply to %s: final text not delivered within %g s", key, close_timeout)
            tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
