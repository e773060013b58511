"""Where a chat turn's events go (`LiveOutput`, the ladder's `TurnOutput` for a chat): the text
and progress (plan, tools, elapsed time) to the live reply, the agent's files kept for after the
final, approvals to the broker, the agent's questions to theirs (the status says the turn
waits for an answer meanwhile). The reply's text is kept here, once (`LiveOutput.text`); the
stream is handed it as it grows. (The agent's commands and context usage are the session's
state, kept in acp.)"""

from __future__ import annotations

import logging
import time

import anyio

from acp import (
    AcpError,
    AcpEvent,
    AgentFile,
    ElicitationAnswer,
    EventKind,
    PendingElicitation,
    PendingPermission,
)
from bot.progress import TurnProgress
from bot.reply import ReplyStream
from bot.services import ConversationServices
from bot.subagent_stop import SubagentStops
from surfaces.base import ConversationKey, Surface, UserRef

log = logging.getLogger(__name__)

FILES_KEPT = 50  # agent files remembered per turn; past it they are dropped with a log line
# Joining the whole reply for the live message copies it: the stream is handed the text as it
# grows, at once unless joining it that often would take more than about 1% of the time; then
# once the share allows (a flood of 80,000 tiny chunks costs a few joins, not 80,000).
JOIN_CHARS_PER_SECOND = 50_000_000
WAITING_NOTE = "waiting for your answer"  # the status while the agent's question is open


class LiveOutput:
    """One chat turn's output, shown live from `show_live` to `stop_live`."""

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
        # The reply's text as it streams in: chunks kept in a list and joined when read (the join
        # replaces them), never a string grown by `+=`, which copies all of it for every chunk.
        self._parts: list[str] = []
        self.progress = TurnProgress()
        self.subagent_stops: SubagentStops | None = None  # set where the reply shows buttons
        self.files: list[AgentFile] = []
        self.started = time.monotonic()
        self._next_join = 0.0  # the stream may be handed the text again from then on
        self._deferred = False  # text waits for `_next_join`, handed on by `_feed`
        self._feeding: anyio.CancelScope | None = None  # `_feed` runs, until `stop_live`
        self._ticking = anyio.CancelScope()
        self._grown = anyio.Event()

    @property
    def text(self) -> str:
        """The reply so far."""
        parts = self._parts
        if len(parts) > 1:
            joined = "".join(parts)
            parts.clear()
            parts.append(joined)
        return parts[0] if parts else ""

    def on_text(self, text: str) -> None:
        if not text:
            return
        parts = self._parts
        if not parts:
            self.services.metrics.first_text.observe(time.monotonic() - self.started)
        parts.append(text)
        if self._deferred:
            return
        now = time.monotonic()
        if now >= self._next_join:
            self._hand_on(now)
            return
        self._deferred = True
        if self._feeding is None:  # only a turn that streams faster than it joins needs it
            self._feeding = anyio.CancelScope()
            self.services.spawn(self._feed)
        self._grown.set()

    def insert(self, at: int, text: str) -> None:
        """Put `text` at offset `at` of the reply so far: a steered message quoted where it was
        sent, though the agent's answer to it may have streamed in first."""
        whole = self.text
        self._parts[:] = [whole[:at] + text + whole[at:]]
        self._hand_on(time.monotonic())

    def _hand_on(self, now: float) -> None:
        text = self.text
        self.reply.update(text)
        self._next_join = now + len(text) / JOIN_CHARS_PER_SECOND

    async def _feed(self) -> None:
        assert self._feeding is not None
        with self._feeding:
            while True:
                await self._grown.wait()
                self._grown = anyio.Event()
                await anyio.sleep(max(0.0, self._next_join - time.monotonic()))
                self._deferred = False
                self._hand_on(time.monotonic())

    def show_progress(self) -> None:
        self.reply.set_status(self.progress.block(time.monotonic() - self.started))

    def show_live(self, tick_interval: float) -> None:
        """Refresh the elapsed time every `tick_interval` s while the turn is quiet (the stream
        paces the edits and skips one that changes nothing), in a task of the app's."""
        self.services.spawn(lambda: self._tick(tick_interval))

    def stop_live(self) -> None:
        if self._feeding is not None:
            self._feeding.cancel()
        self._ticking.cancel()

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
        if event.kind is EventKind.SUBAGENT and self.subagent_stops is not None:
            self.subagent_stops.show(self.progress.subagents.values())

    async def on_permission(self, pending: PendingPermission) -> str | None:
        answer = await self.services.approvals.ask(self.surface, self.key, self.requester, pending)
        self.progress.permission_answered(pending.request, answer)
        return answer

    async def on_elicitation(self, pending: PendingElicitation) -> ElicitationAnswer:
        self.progress.note = WAITING_NOTE
        self.show_progress()
        try:
            return await self.services.elicitations.ask(
                self.surface, self.key, self.requester, pending
            )
        finally:
            if self.progress.note == WAITING_NOTE:
                self.progress.note = ""
            self.show_progress()

    def on_retry(self, error: AcpError, delay: float) -> None:
        self.services.metrics.retried(error)
        self.progress.retrying()
        self.show_progress()
