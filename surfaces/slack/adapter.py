"""The Slack surface on slack-bolt's `AsyncApp` and slack_sdk's `AsyncWebClient`: the only module
that imports them.

Receiving: Socket Mode (`AsyncSocketModeHandler`) when an app token is set, else HTTP mode (our
aiohttp server hands each request to bolt, whose request verification answers a bad or stale
signature with 401 before anything is parsed). Bolt acknowledges every event at once and runs our
listener afterwards; the listener only files the message in its conversation's queue, and one task
per busy conversation hands them to the bot in order, while conversations go on side by side.
Button presses skip the queues. De-duplication is the bot's (through its store); the id we give
it is the message itself, `channel:ts`, so the `message` and `app_mention` twins of one mention
and every redelivery (`X-Slack-Retry-Num`, Socket Mode `retry_attempt`) collapse into one prompt.

Where the bot answers: in DMs always (at top level, or in the thread the person wrote in); in
channels only when mentioned (a top-level mention starts a thread and a conversation) or inside a
thread the bot is part of (one it started or was mentioned in since it started, or whose parent it
wrote). Replies always go into the thread.

Sending: the bot's `ReplyStream` paces operations per channel (`min_edit_interval`) and tells us
what to show; we show it with Slack's native streams where we can, else with
`chat.postMessage` + `chat.update`:

* a live (unformatted) `send` in a thread starts a stream (`chat.startStream`, which Slack allows
  only as a thread reply, and outside DMs only with the recipient named); a live `edit` whose text
  extends what was streamed appends the difference (`chat.appendStream`); the final, rendered
  `edit` stops the stream (`chat.stopStream`), with whatever the stream still lacked, when the
  final was rendered from Markdown that extends the stream (we remember what `render` made from
  what); otherwise the stream is stopped and the message rewritten with `chat.update`.
* A stream shows Markdown, and Markdown cannot be taken back, so the live status line is not
  streamed, and an edit that does not extend the stream (the bot re-split the text, a part moved
  to the next message) stops it and continues that message with `chat.update`. A stream is also
  stopped when it has been quiet for `stream_idle` seconds (the bot skips a final edit whose text
  the message already shows, and Slack would otherwise keep the message "streaming") or before it
  nears Slack's limits (streams die after about 5 minutes, and carry at most about 12k
  characters): the message then goes on with `chat.update`, so nothing streamed is lost.
* Streams are not used at the top level of a DM (they must be thread replies), when Slack says the
  method is unknown or not allowed (then never again), or when one fails to start (that message
  falls back to `chat.postMessage`).

Every call for a channel, whoever makes it (a reply, a stopped stream, an approval prompt, an
ephemeral notice), passes the channel's pacer (`surfaces.pacing`) that starts it at least
`min_edit_interval` after the previous one was answered (Slack counts calls as they arrive, so a
slow request must not squeeze the next one closer) and holds them all back after a 429 for its
`Retry-After`; Slack limits posting per channel. The SDK's
own retries are off: a retried `chat.postMessage` could post twice, and the bot retries what is
safe to retry.

Errors are translated here: 429 -> RateLimited(Retry-After); network trouble and Slack's 5xx ->
SendFailed(transient=True); a message that is gone -> MessageGone; other refusals
(`channel_not_found`, `not_in_channel`, ...) -> SendFailed(transient=False).

Slack bots have no typing indicator (`assistant.threads.setStatus` exists only in assistant
threads, and a reaction costs calls against the channel's budget), so `typing` does nothing: a
stream shows the first words as soon as they exist."""

from __future__ import annotations

import logging
import re
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import anyio
import anyio.abc
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from config import ConfigError
from surfaces.base import (
    Choice,
    ChoiceAnswer,
    ConversationKey,
    Inbound,
    MessageRef,
    OnEvent,
    SurfaceCapabilities,
    UserRef,
)
from surfaces.errors import MessageGone, RateLimited, SendFailed, SurfaceError
from surfaces.recovered_faults import RecoveredFaults, tame
from surfaces.slack.convert import (
    choice_blocks,
    closed_choice_blocks,
    escape,
    message_from_event,
    neutralise_markdown,
    press_from_payload,
    render,
    split_status,
)

log = logging.getLogger(__name__)

NAME = "slack"
DEFAULT_API_URL = "https://slack.com/api/"
EVENTS_PATH = "/slack/events"
# Per message. Slack truncates `text` only past 40,000 characters, but clients fold long messages
# and Slack advises keeping a message under 4,000; section blocks take 3,000 and a stream about
# 12,000. 3,900 rendered characters stays under the advice with room for a closing fence.
MAX_CHARS = 3900
STREAM_IDLE = 3.0  # seconds without an append before a stream is stopped
STREAM_MAX_AGE = 270.0  # Slack ends streams after about 5 minutes
STREAM_MAX_CHARS = 11_000  # ... and they carry at most about 12,000 characters
_REMEMBERED = 10_000  # threads, recipients and posted messages kept in memory (oldest dropped)
_RENDERS = 512

_BAD_TOKEN = {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired"}
_GONE = {"message_not_found", "cant_update_message", "edit_window_closed"}
_TRANSIENT = {"internal_error", "fatal_error", "service_unavailable", "request_timeout"}
# startStream answers that mean streams will never work for this app: stop trying them.
_NO_STREAMS = {
    "unknown_method",
    "not_allowed_token_type",
    "missing_scope",
    "method_deprecated",
    "feature_not_enabled",
}
_STREAM_OVER = {"message_not_in_streaming_state", "message_not_found", "msg_too_long"}

# What slack_sdk's Socket Mode client logs from the loops that reconnect by themselves; some
# attempts as errors with a traceback.
_SOCKET_RETRIES = (
    "Failed to connect (error:",
    "Failed to receive or enqueue a message:",
    "Failed to check the current session",
    "Failed to close the old session",
)
_RE_CONNECTION_FAULT = re.compile(
    r"\b(?:Client\w*Error|Server\w*Error|WSServerHandshakeError|Connection\w*Error"
    r"|BrokenPipeError|TimeoutError|OSError)\b"
)


def _socket_connection_fault(record: logging.LogRecord, fault: BaseException | None) -> bool:
    """A lost or refused Socket Mode connection, which the client retries; not a bug."""
    if not (isinstance(record.msg, str) and record.msg.startswith(_SOCKET_RETRIES)):
        return False
    if fault is not None:
        return isinstance(fault, OSError | aiohttp.ClientError | TimeoutError)
    return _RE_CONNECTION_FAULT.search(record.msg) is not None


_SOCKET_MODE_LOG = tame(
    f"{__name__}.socket_mode", RecoveredFaults("slack", _socket_connection_fault)
)


class _Refused(SendFailed):
    """Slack answered `ok: false` with `error`; this request will not work as it is."""

    def __init__(self, error: str) -> None:
        super().__init__(f"Slack refused the request: {error}", transient=False)
        self.error = error


def _retry_after(exc: SlackApiError) -> float:
    headers = getattr(exc.response, "headers", None) or {}
    for name, value in headers.items():
        if name.lower() == "retry-after":
            try:
                return max(float(value), 0.0)
            except (TypeError, ValueError):
                break
    return 1.0


def _translate(exc: SlackApiError) -> SurfaceError:
    status = getattr(exc.response, "status_code", 200)
    data = getattr(exc.response, "data", None)
    error = str(data.get("error", "")) if isinstance(data, dict) else ""
    if status == 429 or error == "ratelimited":
        return RateLimited(_retry_after(exc))
    if error in _GONE:
        return MessageGone(error)
    if status >= 500 or error in _TRANSIENT:
        return SendFailed(f"Slack is having trouble ({error or status})", transient=True)
    return _Refused(error or f"HTTP {status}")


@dataclass(slots=True)
class _Posted:
    """One message we posted and what it shows."""

    channel: str
    ts: str
    streaming: bool = False
    streamed: str = ""  # the (neutralised) Markdown the stream was given
    shown: str | None = None  # the text last posted or updated, when known
    started: float = field(default_factory=time.monotonic)
    touched: float = field(default_factory=time.monotonic)
    lock: anyio.Lock = field(default_factory=anyio.Lock)


class _Bounded(OrderedDict[Any, Any]):
    """A dict that forgets its oldest entries past `limit`."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def remember(self, key: Any, value: Any = None) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)


class SlackSurface:
    name = NAME

    def __init__(
        self,
        *,
        bot_token: str,
        app_token: str = "",
        signing_secret: str = "",
        api_url: str = "",
        listen: str = "0.0.0.0",
        port: int = 3000,
        min_edit_interval: float = 1.0,
        streaming: bool = True,
        stream_idle: float = STREAM_IDLE,
        stream_max_age: float = STREAM_MAX_AGE,
        request_timeout: float = 30.0,
        ping_interval: float = 10.0,
    ) -> None:
        if not app_token and not signing_secret:
            raise ConfigError(
                "SWITCHBOARD_SLACK__SIGNING_SECRET",
                "HTTP mode needs the signing secret (or set SWITCHBOARD_SLACK__APP_TOKEN for "
                "Socket Mode)",
            )
        self._bot_token = bot_token
        self._app_token = app_token
        self._signing_secret = signing_secret
        self._api_url = api_url or DEFAULT_API_URL
        self._listen = listen
        self._port = port
        self._streaming = streaming
        self._stream_idle = stream_idle
        self._stream_max_age = stream_max_age
        self._timeout = request_timeout
        self._ping_interval = ping_interval
        self.capabilities = SurfaceCapabilities(
            max_chars=MAX_CHARS,
            min_edit_interval=min_edit_interval,
            can_edit=True,
            drafts=False,
            buttons=True,
            threads=True,
            command_prefixes=("!", "/"),
        )
        self._pacing = self.capabilities.pacing  # every call, per channel
        self._session: aiohttp.ClientSession | None = None
        self._client: AsyncWebClient | None = None
        self._bot_user_id = ""
        self._team_id = ""
        self._on_event: OnEvent | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._queues: dict[ConversationKey, deque[Inbound]] = {}
        self._threads = _Bounded(_REMEMBERED)  # (channel, thread) the bot is part of
        self._recipients = _Bounded(_REMEMBERED)  # key -> (user, team) of its latest message
        self._posted = _Bounded(_REMEMBERED)  # ts -> _Posted
        self._streams: dict[str, _Posted] = {}  # ts -> _Posted, while streaming
        self._sources = _Bounded(_RENDERS)  # render() output -> its Markdown
        self.bound_port: int | None = None  # HTTP mode, once listening
        self.handed_over = 0  # events the bot has taken (accepted or refused), for tests

    @property
    def socket_mode(self) -> bool:
        return bool(self._app_token)

    # ---- the Web API --------------------------------------------------------------------------
    def _web(self) -> AsyncWebClient:
        """The client, made on first use: the bot may send before `run` (it re-delivers replies a
        restart cut off) and after it (partial output at shutdown); `close` closes it."""
        if self._client is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout)
            )
            self._client = AsyncWebClient(
                token=self._bot_token,
                base_url=self._api_url,
                session=self._session,
                timeout=int(self._timeout),
                retry_handlers=[],  # never an SDK retry: a re-posted message would show twice
            )
        return self._client

    async def _call(
        self,
        gate: str,
        method: Callable[..., Awaitable[AsyncSlackResponse]],
        /,
        **kwargs: Any,
    ) -> AsyncSlackResponse:
        """One call for channel `gate`, through its gate, with Slack's failures translated."""
        async with self._pacing.call(gate):  # which records a 429 for the channel
            try:
                return await method(**kwargs)
            except SlackApiError as exc:
                raise _translate(exc) from exc
            except SlackClientError as exc:
                raise SendFailed(f"Slack client error: {exc}", transient=False) from exc
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                raise SendFailed(f"cannot reach Slack: {exc!r}", transient=True) from exc

    async def _who_am_i(self) -> None:
        """auth.test: the bot's own ids (to strip its mention and skip its own messages). A
        rejected token is a setting error; network trouble is retried a few times."""
        for attempt in range(4):
            try:
                me = await self._web().auth_test()
            except SlackApiError as exc:
                error = _translate(exc)
                if isinstance(error, _Refused) and error.error in _BAD_TOKEN:
                    raise ConfigError(
                        "SWITCHBOARD_SLACK__BOT_TOKEN", f"Slack rejected the token ({error.error})"
                    ) from exc
                retry = isinstance(error, RateLimited) or (
                    isinstance(error, SendFailed) and error.transient
                )
                if not retry or attempt == 3:
                    raise error from exc
                log.warning("slack: auth.test failed (%s); retrying", error)
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                if attempt == 3:
                    raise SendFailed(f"cannot reach Slack: {exc!r}", transient=True) from exc
                log.warning("slack: cannot reach the Web API (%r); retrying", exc)
            else:
                self._bot_user_id = str(me.get("user_id") or "")
                self._team_id = str(me.get("team_id") or "")
                return
            await anyio.sleep(2**attempt)

    # ---- rendering ----------------------------------------------------------------------------
    def render(self, markdown: str) -> str:
        shown = render(markdown)
        self._sources.remember(shown, markdown)
        return shown

    # ---- sending ------------------------------------------------------------------------------
    def _may_stream(self, key: ConversationKey) -> bool:
        if not self._streaming or not key.thread:
            return False  # streams are thread replies only
        return key.chat.startswith("D") or key in self._recipients

    async def send(self, key: ConversationKey, text: str, *, formatted: bool = False) -> MessageRef:
        if key.thread:
            self._threads.remember((key.chat, key.thread))
        if not formatted and self._may_stream(key):
            answer, _ = split_status(text)
            if answer.strip():
                posted = await self._start_stream(key, answer)
                if posted is not None:
                    return MessageRef(key, posted.ts)
        shown = text if formatted else escape(text)
        response = await self._call(
            key.chat,
            self._web().chat_postMessage,
            channel=key.chat,
            thread_ts=key.thread or None,
            text=shown,
            unfurl_links=False,
            unfurl_media=False,
        )
        ts = str(response["ts"])
        self._posted.remember(ts, _Posted(key.chat, ts, shown=shown))
        return MessageRef(key, ts)

    async def _start_stream(self, key: ConversationKey, answer: str) -> _Posted | None:
        """A new streamed message, or None when this one should be posted instead."""
        markdown = neutralise_markdown(answer)
        if len(markdown) > STREAM_MAX_CHARS:
            return None
        recipient = {}
        if key in self._recipients:
            user, team = self._recipients[key]
            recipient = {"recipient_user_id": user, "recipient_team_id": team}
        try:
            response = await self._call(
                key.chat,
                self._web().chat_startStream,
                channel=key.chat,
                thread_ts=key.thread,
                markdown_text=markdown,
                **recipient,
            )
        except _Refused as exc:
            if exc.error in _NO_STREAMS:
                log.warning(
                    "slack: native streaming unavailable (%s); using chat.update", exc.error
                )
                self._streaming = False
            else:
                log.info("slack: could not start a stream (%s); posting instead", exc.error)
            return None
        ts = str(response["ts"])
        posted = _Posted(key.chat, ts, streaming=True, streamed=markdown)
        self._posted.remember(ts, posted)
        self._streams[ts] = posted
        return posted

    async def edit(self, ref: MessageRef, text: str, *, formatted: bool = False) -> None:
        posted = self._posted.get(ref.id)
        if posted is None:  # not ours to know (a restart): just rewrite it
            posted = _Posted(ref.key.chat, ref.id)
            self._posted.remember(ref.id, posted)
        async with posted.lock:
            if posted.streaming and await self._edit_stream(posted, text, formatted=formatted):
                return
            shown = text if formatted else escape(text)
            if shown == posted.shown:
                return  # Slack would show the same again
            await self._call(
                posted.channel,
                self._web().chat_update,
                channel=posted.channel,
                ts=posted.ts,
                text=shown,
            )
            posted.shown = shown

    async def _edit_stream(self, posted: _Posted, text: str, *, formatted: bool) -> bool:
        """Show `text` through the stream if it can; returns False (the stream stopped) when the
        message must be rewritten instead."""
        if formatted:
            source = self._sources.get(text)
            if source is not None:
                markdown = neutralise_markdown(source)
                if markdown.startswith(posted.streamed) and len(markdown) <= STREAM_MAX_CHARS:
                    return await self._stop_stream(posted, markdown[len(posted.streamed) :])
            await self._stop_stream(posted, "")
            return False
        answer, _ = split_status(text)
        markdown = neutralise_markdown(answer)
        if markdown == posted.streamed:
            return True  # only the status changed: a stream cannot show it and take it back
        fresh = time.monotonic() - posted.started < self._stream_max_age
        if markdown.startswith(posted.streamed) and len(markdown) <= STREAM_MAX_CHARS and fresh:
            delta = markdown[len(posted.streamed) :]
            try:
                await self._call(
                    posted.channel,
                    self._web().chat_appendStream,
                    channel=posted.channel,
                    ts=posted.ts,
                    markdown_text=delta,
                )
            except (_Refused, MessageGone) as exc:
                log.info("slack: stream %s ended early (%s); rewriting it", posted.ts, exc)
                self._end_stream(posted)
                return False
            posted.streamed = markdown
            posted.touched = time.monotonic()
            return True
        await self._stop_stream(posted, "")
        return False

    async def _stop_stream(self, posted: _Posted, delta: str) -> bool:
        """Stop the stream, adding `delta`. Returns whether the message shows it all; False when
        the stream had already ended (Slack ended it, or it was cut short)."""
        try:
            await self._call(
                posted.channel,
                self._web().chat_stopStream,
                channel=posted.channel,
                ts=posted.ts,
                markdown_text=delta or None,
            )
        except (_Refused, MessageGone) as exc:
            log.info("slack: stream %s was already over (%s)", posted.ts, exc)
            self._end_stream(posted)
            return False
        posted.streamed += delta
        self._end_stream(posted)
        return True

    def _end_stream(self, posted: _Posted) -> None:
        posted.streaming = False
        posted.shown = None  # whatever it shows now, the next update rewrites it
        self._streams.pop(posted.ts, None)

    async def _stop_quiet_streams(self) -> None:
        """Stop streams nobody has appended to lately, or that near Slack's time limit."""
        while True:
            await anyio.sleep(min(0.5, self._stream_idle / 2))
            now = time.monotonic()
            for posted in list(self._streams.values()):
                quiet = now - posted.touched >= self._stream_idle
                old = now - posted.started >= self._stream_max_age
                if (quiet or old) and not posted.lock.locked():
                    async with posted.lock:
                        if not posted.streaming:
                            continue
                        try:
                            await self._stop_stream(posted, "")
                        except SurfaceError as exc:
                            log.info("slack: could not stop stream %s yet: %s", posted.ts, exc)
                        except Exception:  # unmapped: give this stream up, keep the others
                            log.exception("slack: stopping stream %s failed", posted.ts)
                            self._streams.pop(posted.ts, None)

    async def preview(self, key: ConversationKey, text: str) -> None:
        return None  # no drafts: live text is streamed or edited into real messages

    async def typing(self, key: ConversationKey) -> None:
        return None  # Slack has no typing indicator for bots (see the module docstring)

    def command_menu(self, commands: Sequence[tuple[str, str]]) -> Any:
        return None  # slash commands live in the app manifest, and not in threads: we parse `!`

    # ---- choices ------------------------------------------------------------------------------
    async def ask_choice(
        self,
        key: ConversationKey,
        prompt: str,
        choices: Sequence[Choice],
        *,
        allowed_users: Sequence[str],
    ) -> MessageRef:
        response = await self._call(
            key.chat,
            self._web().chat_postMessage,
            channel=key.chat,
            thread_ts=key.thread or None,
            text=escape(prompt),
            blocks=choice_blocks(prompt, choices),
            unfurl_links=False,
            unfurl_media=False,
        )
        return MessageRef(key, str(response["ts"]))

    async def close_choice(self, ref: MessageRef, prompt: str, outcome: str) -> None:
        await self._call(
            ref.key.chat,
            self._web().chat_update,
            channel=ref.key.chat,
            ts=ref.id,
            text=escape(f"{prompt}\n{outcome}" if prompt else outcome),
            blocks=closed_choice_blocks(prompt, outcome),
        )

    # ---- receiving ----------------------------------------------------------------------------
    def _in_known_thread(self, channel: str, thread: str) -> bool:
        return (channel, thread) in self._threads

    def _take_message(self, body: dict[str, Any]) -> None:
        event = body.get("event")
        if not isinstance(event, dict):
            return
        message = message_from_event(
            event,
            bot_user_id=self._bot_user_id,
            in_known_thread=self._in_known_thread,
            team_id=str(body.get("team_id") or self._team_id),
        )
        if message is None:
            return
        key = ConversationKey(NAME, message.channel, message.thread)
        if message.thread and not message.is_dm:
            self._threads.remember((message.channel, message.thread))
        if message.team:
            self._recipients.remember(key, (message.user, message.team))
        inbound = Inbound(
            key,
            UserRef(message.user, message.user_name),
            message.text,  # `!compact`: the bot parses Slack's `!` spellings itself
            message.event_id,
        )
        self._enqueue(inbound)

    def _enqueue(self, inbound: Inbound) -> None:
        """File the message in its conversation's queue; a task per busy conversation hands
        them to the bot in order."""
        queue = self._queues.get(inbound.key)
        if queue is not None:
            queue.append(inbound)
            return
        if self._tg is None:
            return  # shutting down
        self._queues[inbound.key] = deque([inbound])
        try:
            self._tg.start_soon(self._drain, inbound.key)
        except RuntimeError:  # the task group is closing: we are shutting down
            del self._queues[inbound.key]

    async def _drain(self, key: ConversationKey) -> None:
        queue = self._queues[key]
        try:
            while queue:
                inbound = queue.popleft()
                assert self._on_event is not None
                try:
                    await self._on_event(inbound)
                except Exception:
                    log.exception("slack: the bot failed on a message in %s", key)
                self.handed_over += 1
        finally:
            del self._queues[key]

    def _take_press(self, body: dict[str, Any]) -> None:
        press = press_from_payload(body)
        if press is None or self._tg is None:
            return
        key = ConversationKey(NAME, press.channel, press.thread)
        user = press.user

        async def notify(text: str) -> None:
            try:
                await self._call(
                    press.channel,
                    self._web().chat_postEphemeral,
                    channel=press.channel,
                    user=user,
                    text=escape(text),
                    thread_ts=press.thread or None,
                )
            except SurfaceError as exc:
                log.warning("slack: could not tell %s: %s", user, exc)

        answer = ChoiceAnswer(
            key, UserRef(user, press.user_name), press.token, press.event_id, notify
        )
        try:
            self._tg.start_soon(self._hand_over, answer)
        except RuntimeError:
            pass  # shutting down

    async def _hand_over(self, answer: ChoiceAnswer) -> None:
        assert self._on_event is not None
        try:
            await self._on_event(answer)
        except Exception:
            log.exception("slack: the bot failed on a button press")
        self.handed_over += 1

    def _bolt_app(self) -> AsyncApp:
        app = AsyncApp(
            name="switchboard",
            client=self._web(),
            signing_secret=self._signing_secret,
            request_verification_enabled=not self.socket_mode,
            process_before_response=False,  # acknowledge first, then run the listener
            attaching_conversation_kwargs_enabled=False,
        )

        async def on_event(body: dict[str, Any]) -> None:
            self._take_message(body)

        async def on_action(ack: AsyncAck, body: dict[str, Any]) -> None:
            await ack()
            self._take_press(body)

        app.event(re.compile(".*"))(on_event)
        app.action(re.compile(".*"))(on_action)
        return app

    async def run(
        self,
        on_event: OnEvent,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            await self._who_am_i()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._close_client()
            raise
        app = self._bolt_app()
        async with anyio.create_task_group() as tg:
            self._on_event = on_event
            self._tg = tg
            tg.start_soon(self._stop_quiet_streams)
            try:
                if self.socket_mode:
                    await self._run_socket_mode(app, task_status)
                else:
                    await self._run_http(app, task_status)
            finally:
                self._tg = None
                tg.cancel_scope.cancel()

    async def _run_socket_mode(
        self, app: AsyncApp, task_status: anyio.abc.TaskStatus[None]
    ) -> None:
        handler = AsyncSocketModeHandler(
            app,
            self._app_token,
            logger=_SOCKET_MODE_LOG,
            web_client=self._web(),
            ping_interval=self._ping_interval,
        )
        try:
            try:  # a rejected app token is a setting error, not a reconnect loop
                opened = await self._web().apps_connections_open(app_token=self._app_token)
            except SlackApiError as exc:
                error = _translate(exc)
                if isinstance(error, _Refused):
                    raise ConfigError(
                        "SWITCHBOARD_SLACK__APP_TOKEN",
                        f"Slack refused to open a Socket Mode connection ({error.error})",
                    ) from exc
                raise error from exc
            handler.client.wss_uri = str(opened["url"])
            await handler.connect_async()  # type: ignore[no-untyped-call]
            task_status.started()
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await handler.close_async()  # type: ignore[no-untyped-call]

    async def _run_http(self, app: AsyncApp, task_status: anyio.abc.TaskStatus[None]) -> None:
        async def handle(request: web.Request) -> web.Response:
            response = await app.async_dispatch(await to_bolt_request(request))
            return await to_aiohttp_response(response)

        server = web.Application()
        server.router.add_post(EVENTS_PATH, handle)
        runner = web.AppRunner(server, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self._listen, self._port)
            await site.start()
            addresses = runner.addresses
            self.bound_port = int(addresses[0][1]) if addresses else self._port
            task_status.started()
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await runner.cleanup()

    async def close(self) -> None:
        """Stop the streams still open, then close the connection (after the last reply)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            for posted in list(self._streams.values()):
                async with posted.lock:
                    if posted.streaming:
                        try:
                            await self._stop_stream(posted, "")
                        except SurfaceError as exc:
                            log.info("slack: could not stop stream %s: %s", posted.ts, exc)
            await self._close_client()

    async def _close_client(self) -> None:
        session, self._session, self._client = self._session, None, None
        if session is not None:
            await session.close()
