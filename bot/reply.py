"""The surface-neutral reply stream: one reply (one turn) shown live and then delivered in full.

What is the bot's lives here; how a platform shows a reply being written is the surface's
`LiveReply` (`Surface.open_live`, see `surfaces.base`), which keeps what each of its messages
shows, skips calls that change nothing and paces its own calls through the chat's `ChatPacer`.

While the agent streams, the latest text is shown as plain, unrendered text (half-written Markdown
renders badly and some dialects reject it outright), split into message-sized parts without
breaking code fences, coalesced: whatever arrives while the live reply waits for its turn
(`LiveReply.ready`) or makes its calls is shown at once by the next `show`, the newest text
winning. A part the text has grown past for good (`settled_parts`: no text the agent adds can move
its boundary) is rendered and shown in its final form at once, and never touched again: one call
instead of live ones plus a final one, and the final calls spread over the reply rather than all at
its end. A status block (`set_status`) shows under the live text and never in the final.

`finish` renders the final text per part and has the live reply show it, and makes sure it
arrives: each message is tried again (stamina) after a 429 (which the pacer waits out), a
transient failure (with backoff) or a message that is gone (sent anew), up to `max_attempts`
times, and a message the platform refuses for good is given up on while the rest are delivered.
Leaving `open_reply` without `finish` (an error, a cancelled turn) delivers the latest text,
shielded and bounded, so partial output is never lost."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
import stamina

from bot.markdown_split import settled_parts, split_message
from surfaces.base import Choice, ConversationKey, LivePart, Surface
from surfaces.errors import MessageGone, PartFailed, RateLimited, SendFailed, SurfaceError
from surfaces.pacing import ChatPacer

__all__ = ["ReplyStream", "open_reply", "split_message"]

log = logging.getLogger(__name__)

# The status block's bounds: the agent decides what goes into it.
STATUS_LINES = 20
STATUS_CHARS = 1500


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
        self._live_reply = surface.open_live(key)
        self._max_attempts = max(1, max_attempts)
        self._retry_delay = retry_delay
        self._typing_interval = typing_interval
        self._text = ""
        self._status: str | None = None
        self._buttons: tuple[Choice, ...] = ()
        self._changed = anyio.Event()
        self._live = True  # off for good after a live failure that won't heal
        self._live_scope = anyio.CancelScope()
        self._live_done = anyio.Event()
        self._typing_scope = anyio.CancelScope()
        self._final: str | None = None  # set by finish(); the exit path retries it if interrupted
        self._outcome: bool | None = None  # finish()'s result once it ran to the end
        self._split_cache: tuple[str, list[str]] = ("", [])
        # The leading source parts of the text that can no longer change, each with what it
        # renders to: shown in final form as soon as they settle (see _live_parts).
        self._settled: list[tuple[str, list[str]]] = []
        self._settled_for = ""  # the text they were worked out for

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
        takes them off. Left out where the surface's live messages cannot carry them."""
        if self._final is None:
            self._buttons = tuple(buttons)
            self._changed.set()

    async def finish(self, text: str) -> bool:
        """Deliver the final text, rendered, and return whether every part arrived."""
        self._final = text
        self._live_scope.cancel()
        self._typing_scope.cancel()  # the final is on its way
        await self._live_done.wait()  # a call in flight completes first; then it's ours alone
        parts = self._final_parts(text)
        given_up: set[int] = set()
        delivered = True
        while (failed := await self._finish_live(parts, given_up)) is not None:
            given_up.add(failed.index)
            delivered = delivered and failed.index >= len(parts)  # a blank is not the answer
            if failed.transient:
                log.error(
                    "reply to %s: gave up on part %d after %d attempts",
                    self._key,
                    failed.index + 1,
                    self._max_attempts,
                )
            else:
                log.warning(
                    "reply to %s: part %d not delivered: %s", self._key, failed.index + 1, failed
                )
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

    async def _finish_live(self, parts: list[str], given_up: set[int]) -> PartFailed | None:
        """Have the live reply show `parts`, each message tried up to `max_attempts` times: None
        once every part not given up on shows, else the failure that ended one message's tries."""
        while True:
            stuck_at: int | None = None  # the message this round of attempts is spent on

            def again(exc: Exception) -> bool | float:
                nonlocal stuck_at
                if not isinstance(exc, PartFailed) or not exc.transient:
                    return False
                if stuck_at is None:
                    stuck_at = exc.index
                if exc.index != stuck_at:
                    return False  # it got further: the next message gets its own round
                if isinstance(exc.error, SendFailed):
                    return True  # exponential backoff
                return 0.0  # a 429 is waited out by the chat's pacer; a gone message sent anew

            try:
                async for attempt in stamina.retry_context(
                    on=again,
                    attempts=self._max_attempts,
                    timeout=None,
                    wait_initial=self._retry_delay,
                    wait_max=self._retry_delay * 2**self._max_attempts,
                    wait_jitter=self._retry_delay,
                ):
                    with attempt:
                        await self._live_reply.finish(parts, skip=given_up)
                return None
            except PartFailed as failed:
                if not (failed.transient and failed.index != stuck_at):
                    return failed

    # -- background tasks, run by open_reply -----------------------------------------------------

    def _live_parts(self) -> list[LivePart]:
        """The latest text as the live reply shows it: the settled parts in final form, then the
        rest as plain text."""
        text = self._text
        if not text.strip():
            return []
        if self._split_cache[0] != text:
            self._split_cache = (text, split_message(text, self._caps.max_chars, self._caps.count))
        parts = self._split_cache[1]
        # Parts the text has grown past are shown once, in their final form, and finish() finds
        # them done. The status block comes after the text, so it cannot move a settled part.
        settled = self._settle() if len(parts) > 1 else []  # the last part never settles
        if [source for source, _ in settled] != parts[: len(settled)]:
            settled = []  # never expected; the live split is then shown as it is
        return [
            *(LivePart(piece, final=True) for _, pieces in settled for piece in pieces),
            *(LivePart(part) for part in parts[len(settled) :]),
        ]

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
                while self._live:
                    await self._changed.wait()
                    self._changed = anyio.Event()
                    # Whatever arrives while the live reply waits for its turn is coalesced
                    # into the show that follows.
                    await self._live_reply.ready()
                    parts = self._live_parts()
                    if parts or self._status:
                        await self._show(parts)
        finally:
            self._live_done.set()

    async def _show(self, parts: list[LivePart]) -> None:
        try:
            if await self._live_reply.show(parts, self._status, self._buttons):
                self._typing_scope.cancel()  # the platform clears the indicator on a message
        except (RateLimited, MessageGone):
            pass  # the pacer holds the chat back; a gone message is sent anew next time
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
            while True:
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
        tg.start_soon(reply._stream_live)
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
