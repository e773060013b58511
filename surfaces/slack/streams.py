"""The messages of a live reply on Slack (`surfaces.slack.live`): native streams where they work,
`chat.postMessage` + `chat.update` where they do not, and the hand-over from one to the other.
Each message's record (`Posted`) is the one place that says what it shows.

* A live (not final) message in a thread starts a stream (`chat.startStream`, which Slack allows
  only as a thread reply, and outside DMs only with the recipient named); a live `edit` whose text
  extends what was streamed appends the difference (`chat.appendStream`); the final, rendered
  text stops the stream (`chat.stopStream`), with whatever the stream still lacked, when the
  final was rendered from Markdown that extends the stream (`remember_render` keeps what `render`
  made from what); otherwise the stream is stopped and the message rewritten with `chat.update`.
* A stream shows Markdown, and Markdown cannot be taken back, so the live status line is not
  streamed, and a text that does not extend the stream (the bot re-split the text, a part moved
  to the next message) stops it and continues that message with `chat.update`. A stream is also
  stopped when it has been quiet for `idle` seconds (the agent is working without writing, and
  Slack would otherwise keep the message "streaming"; the status it could not show is then put
  on the message at once) or before it
  nears Slack's limits (streams die after about 5 minutes, and carry at most about 12k
  characters): the message then goes on with `chat.update`, so nothing streamed is lost.
* Buttons (the live reply's Stop): `chat.startStream` and `chat.appendStream` take no blocks;
  only `chat.stopStream` does. So a streamed reply shows its buttons once its stream stops before
  the reply is done (it went quiet: the agent is working without writing, which is when Stop is
  wanted; or it neared Slack's limits): they are put at its bottom by `chat.stopStream`, and the
  message goes on with `chat.update`. While words are streaming there is no button (`!stop`
  works). A posted message carries them at once, its text in section blocks above an actions
  block; an update without buttons takes them off (`blocks: []`).
* Streams are not used at the top level of a DM (they must be thread replies), when Slack says the
  method is unknown or not allowed (then never again), or when one fails to start (that message
  falls back to `chat.postMessage`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from surfaces.base import Choice, ConversationKey
from surfaces.bounded import BoundedMap
from surfaces.errors import MessageGone, SurfaceError
from surfaces.slack.convert import (
    button_blocks,
    message_blocks,
    neutralise_markdown,
    slack_buttons,
    split_status,
)
from surfaces.slack.errors import NO_STREAMS, Refused
from surfaces.slack.web_api import WebApi
from surfaces.text import escape_angle_brackets

__all__ = ["STREAM_IDLE", "STREAM_MAX_AGE", "STREAM_MAX_CHARS", "NativeStreams", "Posted"]

log = logging.getLogger(__name__)

STREAM_IDLE = 3.0  # seconds without an append before a stream is stopped
STREAM_MAX_AGE = 270.0  # Slack ends streams after about 5 minutes
STREAM_MAX_CHARS = 11_000  # ... and they carry at most about 12,000 characters
REMEMBERED = 10_000  # recipients and posted messages kept in memory (oldest dropped)
RENDERS = 512  # render() outputs whose Markdown is kept


@dataclass(slots=True, eq=False)
class Posted:
    """One message of a live reply and what it shows."""

    channel: str
    ts: str | None = None  # None: not posted yet, or gone and to be posted again
    text: str | None = None  # the text it shows (None: not known, the next put rewrites it)
    final: bool = False  # shown in final (rendered) form
    buttons: tuple[Choice, ...] = ()  # the buttons it shows
    wanted: tuple[Choice, ...] = ()  # the ones asked for: a stream shows them once it stops
    streaming: bool = False
    streamed: str = ""  # the (neutralised) Markdown the stream was given
    started: float = field(default_factory=time.monotonic)
    touched: float = field(default_factory=time.monotonic)
    lock: anyio.Lock = field(default_factory=anyio.Lock)

    def shows(self, text: str, *, final: bool, buttons: tuple[Choice, ...] = ()) -> bool:
        """Whether putting this would change nothing (a live message always takes its final
        text: that is how its stream learns the reply ended)."""
        return (
            self.ts is not None
            and self.text == text
            and (self.final or not final)
            and self.buttons == buttons
        )


class NativeStreams:
    """Puts a live reply's messages on Slack, streaming them where Slack lets us. `enabled=False`
    (or Slack saying streams are not for this app) leaves only `chat.postMessage` +
    `chat.update`. Run `stop_quiet` as a task while the surface runs; `stop_all` at close."""

    def __init__(self, api: WebApi, *, enabled: bool, idle: float, max_age: float) -> None:
        self._api = api
        self._enabled = enabled
        self._idle = idle
        self._max_age = max_age
        # key -> (user, team) of its latest message: who a channel stream is for
        self._recipients: BoundedMap[ConversationKey, tuple[str, str]] = BoundedMap(REMEMBERED)
        self._streams: dict[str, Posted] = {}  # ts -> its message, while streaming
        self._sources: BoundedMap[str, str] = BoundedMap(RENDERS)  # render() output -> Markdown

    def remember_recipient(self, key: ConversationKey, user: str, team: str) -> None:
        self._recipients.remember(key, (user, team))

    def remember_render(self, shown: str, markdown: str) -> None:
        self._sources.remember(shown, markdown)

    # ---- putting a message --------------------------------------------------------------------
    async def put(
        self,
        posted: Posted,
        key: ConversationKey,
        text: str,
        *,
        final: bool,
        buttons: tuple[Choice, ...],
    ) -> None:
        """Make `posted` show `text` (`final`: `render()` output, else the live, plain text) with
        `buttons`: posted or streamed when new, else appended, stopped or updated."""
        async with posted.lock:
            posted.wanted = buttons
            if posted.ts is None:
                await self._post(posted, key, text, final=final, buttons=buttons)
            elif not (posted.streaming and await self._edit_stream(posted, text, final=final)):
                await self._update(posted, text, final=final, buttons=buttons)
            posted.text, posted.final = text, final

    async def _post(
        self,
        posted: Posted,
        key: ConversationKey,
        text: str,
        *,
        final: bool,
        buttons: tuple[Choice, ...],
    ) -> None:
        if not final and self._may_stream(key):
            answer, _ = split_status(text)
            if answer.strip() and await self._start(posted, key, answer):
                return
        shown = text if final else escape_angle_brackets(text)
        response = await self._api.shielded(
            key.chat,
            self._api.web.chat_postMessage,
            channel=key.chat,
            thread_ts=key.thread or None,
            unfurl_links=False,
            unfurl_media=False,
            **message_fields(shown, buttons),
        )
        posted.ts, posted.buttons = str(response["ts"]), buttons

    async def _update(
        self, posted: Posted, text: str, *, final: bool, buttons: tuple[Choice, ...]
    ) -> None:
        shown = text if final else escape_angle_brackets(text)
        fields = message_fields(shown, buttons, clear=posted.buttons != ())
        try:
            await self._call_on(posted, self._api.web.chat_update, **fields)
        except MessageGone:
            posted.ts, posted.text = None, None  # deleted: posted anew by the next put
            raise
        posted.buttons = buttons

    # ---- streams ------------------------------------------------------------------------------
    def _may_stream(self, key: ConversationKey) -> bool:
        if not self._enabled or not key.thread:
            return False  # streams are thread replies only
        return key.chat.startswith("D") or key in self._recipients

    async def _start(self, posted: Posted, key: ConversationKey, answer: str) -> bool:
        """Start `posted` as a stream; False when it should be posted instead."""
        markdown = neutralise_markdown(answer)
        if len(markdown) > STREAM_MAX_CHARS:
            return False
        recipient = {}
        if key in self._recipients:
            user, team = self._recipients[key]
            recipient = {"recipient_user_id": user, "recipient_team_id": team}
        try:
            response = await self._api.shielded(
                key.chat,
                self._api.web.chat_startStream,
                channel=key.chat,
                thread_ts=key.thread,
                markdown_text=markdown,
                **recipient,
            )
        except Refused as exc:
            if exc.error in NO_STREAMS:
                log.warning(
                    "slack: native streaming unavailable (%s); using chat.update", exc.error
                )
                self._enabled = False
            else:
                log.info("slack: could not start a stream (%s); posting instead", exc.error)
            return False
        posted.ts, posted.buttons = str(response["ts"]), ()
        posted.streaming, posted.streamed = True, markdown
        posted.started = posted.touched = time.monotonic()
        self._streams[posted.ts] = posted
        return True

    async def _edit_stream(self, posted: Posted, text: str, *, final: bool) -> bool:
        """Show `text` through the stream if it can; returns False (the stream stopped) when the
        message must be rewritten instead."""
        if final:
            source = self._sources.get(text)
            if source is not None:
                markdown = neutralise_markdown(source)
                if markdown.startswith(posted.streamed) and len(markdown) <= STREAM_MAX_CHARS:
                    return await self._stop(posted, markdown[len(posted.streamed) :])
            await self._stop(posted, "")
            return False
        answer, _ = split_status(text)
        markdown = neutralise_markdown(answer)
        if markdown == posted.streamed:
            return True  # only the status changed: a stream cannot show it and take it back
        fresh = time.monotonic() - posted.started < self._max_age
        if markdown.startswith(posted.streamed) and len(markdown) <= STREAM_MAX_CHARS and fresh:
            delta = markdown[len(posted.streamed) :]
            try:
                await self._call_on(posted, self._api.web.chat_appendStream, markdown_text=delta)
            except (Refused, MessageGone) as exc:
                log.info("slack: stream %s ended early (%s); rewriting it", posted.ts, exc)
                self._end(posted)
                return False
            posted.streamed = markdown
            posted.touched = time.monotonic()
            return True
        await self._stop(posted, "")
        return False

    async def _stop(self, posted: Posted, delta: str, *, with_buttons: bool = False) -> bool:
        """Stop the stream, adding `delta` (and, `with_buttons`, the buttons the bot wants at its
        bottom). Returns whether the message shows it all; False when the stream had already
        ended (Slack ended it, or it was cut short)."""
        extra: dict[str, Any] = {}
        blocks = button_blocks(posted.wanted) if with_buttons else []
        if blocks:
            extra["blocks"] = blocks
        try:
            await self._call_on(
                posted, self._api.web.chat_stopStream, markdown_text=delta or None, **extra
            )
        except (Refused, MessageGone) as exc:
            log.info("slack: stream %s was already over (%s)", posted.ts, exc)
            self._end(posted)
            return False
        posted.streamed += delta
        self._end(posted)
        posted.buttons = posted.wanted if extra else ()
        return True

    def _end(self, posted: Posted) -> None:
        posted.streaming = False
        posted.text = None  # whatever it shows now, the next put rewrites it
        if posted.ts is not None:
            self._streams.pop(posted.ts, None)

    async def _call_on(
        self,
        posted: Posted,
        method: Callable[..., Awaitable[AsyncSlackResponse]],
        /,
        **kwargs: Any,
    ) -> None:
        """`method` (a method of the Web API that changes one message) on `posted`."""
        await self._api.shielded(
            posted.channel, method, channel=posted.channel, ts=posted.ts, **kwargs
        )

    # ---- stopping streams nobody finishes -----------------------------------------------------
    async def stop_quiet(self) -> None:
        """Forever: stop streams nobody has appended to lately, or that near Slack's time limit."""
        while True:
            await anyio.sleep(min(0.5, self._idle / 2))
            now = time.monotonic()
            for posted in list(self._streams.values()):
                quiet = now - posted.touched >= self._idle
                old = now - posted.started >= self._max_age
                if (quiet or old) and not posted.lock.locked():
                    async with posted.lock:
                        if not posted.streaming:
                            continue
                        try:
                            await self._go_quiet(posted)
                        except SurfaceError as exc:
                            log.info("slack: could not stop stream %s yet: %s", posted.ts, exc)
                        except Exception:  # unmapped: give this stream up, keep the others
                            log.exception("slack: stopping stream %s failed", posted.ts)
                            self._end(posted)

    async def _go_quiet(self, posted: Posted) -> None:
        """Stop a quiet stream with the buttons at its bottom, then show the progress the stream
        could not (the status block): a quiet agent is when a person looks for both."""
        wanted = posted.text
        if not await self._stop(posted, "", with_buttons=True) or wanted is None:
            return
        if split_status(wanted)[1]:
            await self._update(posted, wanted, final=False, buttons=posted.wanted)
            posted.text, posted.final = wanted, False

    async def stop_all(self) -> None:
        """Stop every stream still open (the surface is closing)."""
        for posted in list(self._streams.values()):
            async with posted.lock:
                if posted.streaming:
                    try:
                        await self._stop(posted, "")
                    except SurfaceError as exc:
                        log.info("slack: could not stop stream %s: %s", posted.ts, exc)


def message_fields(shown: str, buttons: Sequence[Choice], *, clear: bool = False) -> dict[str, Any]:
    """A posted message's `text` (with blocks: the notification's text) and its `blocks`: its
    text in sections above its buttons; `clear`: no buttons, and the ones it had taken off."""
    if slack_buttons(buttons):
        return {"text": shown, "blocks": message_blocks(shown, buttons)}
    return {"text": shown, "blocks": []} if clear else {"text": shown}
