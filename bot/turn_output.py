"""Where a chat turn's events go (`LiveOutput`, the ladder's `TurnOutput` for a chat): the text
and progress (plan, tools, elapsed time) to the live reply, the agent's files kept for after the
final, approvals to the broker. The reply's text is kept here, once (`ReplyText`); the stream is
handed it as it grows. (The agent's commands and context usage are the session's state, kept in
acp.)"""

from __future__ import annotations

import logging
import time

import anyio

from acp import AcpError, AcpEvent, AgentFile, EventKind, PendingPermission
from bot.progress import TurnProgress
from bot.reply import ReplyStream
from bot.services import ConversationServices
from surfaces.base import ConversationKey, Surface, UserRef

log = logging.getLogger(__name__)

FILES_KEPT = 50  # agent files remembered per turn; past it they are dropped with a log line
# Joining the whole reply for the live message copies it: the stream is handed the text at most
# as often as that copying stays about 1% of the time, however many chunks arrive in between
# (a flood of 80,000 tiny chunks then costs a few joins, not 80,000).
JOIN_CHARS_PER_SECOND = 50_000_000


class ReplyText:
    """A reply's text as it streams in: chunks kept in a list and joined when read (the join
    replaces them), never a string grown by `+=`, which copies all of it for every chunk."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[str] = []

    def append(self, chunk: str) -> None:
        self._parts.append(chunk)

    def __bool__(self) -> bool:
        return bool(self._parts)

    def __str__(self) -> str:
        parts = self._parts
        if len(parts) > 1:
            parts[:] = ["".join(parts)]
        return parts[0] if parts else ""


class LiveOutput:
    """One chat turn's output, shown live while `show_live` runs (until `stop_live`)."""

    def __init__(
        self,
        services: ConversationServices,
        surface: Surface,
        key: ConversationKey,
        reply: ReplyStream,
        requester: UserRef,
    ) -> None:
        self.services = services
        self.surface = surface
        self.key = key
        self.reply = reply
        self.requester = requester
        self.text = ReplyText()
        self.progress = TurnProgress()
        self.files: list[AgentFile] = []
        self.started = time.monotonic()
        self._grown = anyio.Event()
        self._told = False  # `_grown` is set for what arrived since the feeder last ran
        self._feeding = anyio.CancelScope()
        self._ticking = anyio.CancelScope()

    def on_text(self, text: str) -> None:
        if not text:
            return
        if not self._told:
            if not self.text:
                self.services.metrics.first_text.observe(time.monotonic() - self.started)
            self._told = True
            self._grown.set()
        self.text.append(text)

    def show_progress(self) -> None:
        self.reply.set_status(self.progress.block(time.monotonic() - self.started))

    def show_live(self, tick_interval: float) -> None:
        """Start handing the stream the text as it grows, and refreshing the elapsed time every
        `tick_interval` s while the turn is quiet (the stream paces the edits and skips one that
        changes nothing), in tasks of the app's."""
        self.services.spawn(self._feed)
        self.services.spawn(lambda: self._tick(tick_interval))

    def stop_live(self) -> None:
        self._feeding.cancel()
        self._ticking.cancel()

    async def _feed(self) -> None:
        with self._feeding:
            while True:
                await self._grown.wait()
                self._grown, self._told = anyio.Event(), False
                text = str(self.text)
                self.reply.update(text)
                await anyio.sleep(len(text) / JOIN_CHARS_PER_SECOND)

    async def _tick(self, interval: float) -> None:
        with self._ticking:
            while True:
                await anyio.sleep(interval)
                self.show_progress()

    async def on_event(self, event: AcpEvent) -> None:
        if event.kind is EventKind.FILE and event.file is not None:
            if len(self.files) < FILES_KEPT:
                self.files.append(event.file)
            else:
                log.info("%s: more than %d agent files; dropping", self.key, FILES_KEPT)
            return
        if self.progress.on_event(event):
            self.show_progress()

    async def on_permission(self, pending: PendingPermission) -> str | None:
        answer = await self.services.approvals.ask(self.surface, self.key, self.requester, pending)
        self.progress.permission_answered(pending.request, answer)
        return answer

    def on_retry(self, error: AcpError, delay: float) -> None:
        self.services.metrics.retried(error)
        self.progress.retrying()
        self.show_progress()
