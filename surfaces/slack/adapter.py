"""The Slack surface on slack-bolt's `AsyncApp` and slack_sdk's `AsyncWebClient`. With
`web_api.py` (the paced, translated calls), `live.py` and `streams.py` (replies, streamed where
Slack allows), `receivers.py` (Socket Mode and HTTP mode) and `errors.py`, the only code that
imports them.

Receiving: Socket Mode when an app token is set, else HTTP mode (our aiohttp server hands each
request to bolt, whose request verification answers a bad or stale signature with 401 before
anything is parsed). Bolt acknowledges every event at once and runs our listener afterwards; the
listener only files the message in its conversation's lane (`surfaces.lanes`), which hands one
conversation's messages to the bot in order, while conversations go on side by side. Button
presses skip the lanes. De-duplication is the bot's (through its store); the id we give it is the
message itself, `channel:ts`, so the `message` and `app_mention` twins of one mention and every
redelivery (`X-Slack-Retry-Num`, Socket Mode `retry_attempt`) collapse into one prompt.

Where the bot answers: in DMs always (at top level, or in the thread the person wrote in); in
channels only when mentioned (a top-level mention starts a thread and a conversation) or inside a
thread the bot is part of (one it started or was mentioned in since it started, or whose parent it
wrote). Replies always go into the thread. A typed answer the bot asks for (`ask_text`)
mentions the person, and their next message in that channel is taken as the answer even without
a mention, at the channel's top level too (`answers.py`).

Sending: a reply is the `SlackLive` of `open_live` (`live.py`), shown by `streams.py` with native
streams where it can, else `chat.postMessage` + `chat.update`; `send` and `edit` post and update.
Every call passes the channel's pacer once (`web_api.py`).

Files: a message's shared files reach the bot as `IncomingFile`s, fetched only on demand through
`files.info` and the bot token (`files.py`); the agent's files are uploaded into the thread.
Buttons on a reply (Stop) are an actions block; pressed, they arrive like a choice's. Slack has no
per-conversation command menu, so the agent's commands are kept (`home.py`) to turn a typed
`!name` into `/name` and to show in App Home, which `app_home_opened` publishes per person.

Slack bots have no typing indicator (`assistant.threads.setStatus` exists only in assistant
threads, and a reaction costs calls against the channel's budget), so `typing` does nothing: a
stream shows the first words as soon as they exist."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.abc
from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.errors import SlackApiError

from config import ConfigError
from config.settings import SlackSettings
from surfaces.awaited_replies import AwaitedReplies
from surfaces.base import (
    Choice,
    ChoiceAnswer,
    ConversationKey,
    Inbound,
    IncomingFile,
    LiveReply,
    MenuCommand,
    MessageRef,
    OnEvent,
    OutgoingFile,
    SurfaceCapabilities,
    UserRef,
)
from surfaces.bounded import BoundedMap
from surfaces.errors import SendFailed
from surfaces.lanes import Lanes
from surfaces.recovered_faults import RecoveredFaults, tame
from surfaces.slack.answers import asking_text, awaited_message
from surfaces.slack.convert import (
    agent_spelling,
    choice_blocks,
    closed_choice_blocks,
    message_from_event,
)
from surfaces.slack.errors import (
    BAD_TOKEN,
    NETWORK_ERRORS,
    Refused,
    api_error,
    socket_connection_fault,
    unreachable,
)
from surfaces.slack.files import MAX_UPLOAD_BYTES, file_from_ref, incoming, upload
from surfaces.slack.home import Home
from surfaces.slack.live import SlackLive
from surfaces.slack.markup import render
from surfaces.slack.presses import answer_of
from surfaces.slack.receivers import run_http, run_socket_mode
from surfaces.slack.streams import STREAM_IDLE, STREAM_MAX_AGE, NativeStreams, message_fields
from surfaces.slack.web_api import WebApi
from surfaces.startup import retry_start_up
from surfaces.text import escape_angle_brackets

log = logging.getLogger(__name__)

NAME = "slack"
# Per message. Slack truncates `text` only past 40,000 characters, but clients fold long messages
# and Slack advises keeping a message under 4,000; section blocks take 3,000 and a stream about
# 12,000. 3,900 rendered characters stays under the advice with room for a closing fence.
MAX_CHARS = 3900
THREADS = 10_000  # (channel, thread) pairs the bot is part of kept in memory (oldest dropped)

_SOCKET_MODE_LOG = tame(
    f"{__name__}.socket_mode", RecoveredFaults("slack", socket_connection_fault)
)


class SlackSurface:
    name = NAME

    # ---- capabilities -------------------------------------------------------------------------
    def __init__(
        self,
        settings: SlackSettings,
        *,
        min_edit_interval: float = 1.0,
        streaming: bool = True,
        stream_idle: float = STREAM_IDLE,
        stream_max_age: float = STREAM_MAX_AGE,
        request_timeout: float = 30.0,
        ping_interval: float = 10.0,
        answer_wait: float = 300.0,  # a typed answer awaited: the bot's approval timeout
    ) -> None:
        if not settings.app_token and not settings.signing_secret:
            raise ConfigError(
                "SWITCHBOARD_SLACK__SIGNING_SECRET",
                "HTTP mode needs the signing secret (or set SWITCHBOARD_SLACK__APP_TOKEN for "
                "Socket Mode)",
            )
        self.settings = settings
        self._ping_interval = ping_interval
        self.capabilities = SurfaceCapabilities(
            max_chars=MAX_CHARS,
            min_edit_interval=min_edit_interval,
            can_edit=True,
            command_prefixes=("!", "/"),
            message_buttons=True,
            max_upload_bytes=MAX_UPLOAD_BYTES,  # an uploaded image shows as a picture
            agent_menus=True,  # kept for `!name` and App Home: Slack has no per-chat menu
        )
        self._api = WebApi(
            settings.bot_token,
            settings.api_url,
            timeout=request_timeout,
            pacing=self.capabilities.pacing,  # every call, per channel, shared with the bot
        )
        self._streams = NativeStreams(
            self._api, enabled=streaming, idle=stream_idle, max_age=stream_max_age
        )
        self._lanes: Lanes[ConversationKey, Inbound] = Lanes(
            self._hand_over, failure="slack: the bot failed on a message in %s", logger=log
        )
        self._bot_user_id = ""
        self._team_id = ""
        self._on_event: OnEvent | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._threads: BoundedMap[tuple[str, str], None] = BoundedMap(THREADS)
        self._awaited = AwaitedReplies(answer_wait)
        self._home = Home({*settings.allowed_users, *settings.approvers, *settings.admins})
        self.bound_port: int | None = None  # HTTP mode, once listening

    @property
    def socket_mode(self) -> bool:
        return bool(self.settings.app_token)

    def render(self, markdown: str) -> str:
        shown = render(markdown)
        self._streams.remember_render(shown, markdown)
        return shown

    def command_menu(self, commands: Sequence[tuple[str, str]]) -> Any:
        # Slash commands live in the app manifest, and not in threads: we parse `!`. App Home
        # lists them.
        self._home.set_ours(commands)
        return None

    # ---- lifecycle ----------------------------------------------------------------------------
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
                await self._api.close()
            raise
        app = self._bolt_app()
        async with anyio.create_task_group() as tg:
            self._on_event = on_event
            self._tg = tg
            self._lanes.open(tg)
            tg.start_soon(self._streams.stop_quiet)
            try:
                if self.socket_mode:
                    await run_socket_mode(
                        app,
                        self._api.web,
                        self.settings.app_token,
                        logger=_SOCKET_MODE_LOG,
                        ping_interval=self._ping_interval,
                        task_status=task_status,
                    )
                else:
                    await run_http(
                        app,
                        self.settings.listen,
                        self.settings.port,
                        signing_secret=self.settings.signing_secret,
                        on_bound=self._bound,
                        task_status=task_status,
                    )
            finally:
                self._tg = None
                self._lanes.close()
                tg.cancel_scope.cancel()

    async def close(self) -> None:
        """Stop the streams still open, then close the connection (after the last reply)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await self._streams.stop_all()
            await self._api.close()

    async def _who_am_i(self) -> None:
        """auth.test: the bot's own ids (to strip its mention and skip its own messages). A
        rejected token is a setting error; network trouble is retried a few times."""
        try:
            me = await retry_start_up(
                self._api.web.auth_test, retry_on=unreachable, surface=NAME, logger=log
            )
        except SlackApiError as exc:
            error = api_error(exc)
            if isinstance(error, Refused) and error.error in BAD_TOKEN:
                raise ConfigError(
                    "SWITCHBOARD_SLACK__BOT_TOKEN", f"Slack rejected the token ({error.error})"
                ) from exc
            raise error from exc
        except NETWORK_ERRORS as exc:
            raise SendFailed(f"cannot reach Slack: {exc!r}", transient=True) from exc
        self._bot_user_id = str(me.get("user_id") or "")
        self._team_id = str(me.get("team_id") or "")

    def _bolt_app(self) -> AsyncApp:
        app = AsyncApp(
            name="switchboard",
            client=self._api.web,
            signing_secret=self.settings.signing_secret,
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

    # ---- inbound ------------------------------------------------------------------------------
    def _take_message(self, body: dict[str, Any]) -> None:
        """Bolt's listener for every event: file a message for the bot in its lane."""
        event = body.get("event")
        if not isinstance(event, dict):
            return
        if event.get("type") == "app_home_opened":
            self._open_home(event)
            return
        team = str(body.get("team_id") or self._team_id)
        ids = {"bot_user_id": self._bot_user_id, "team_id": team}
        message = message_from_event(event, in_known_thread=self._in_known_thread, **ids)
        if message is None:
            message = awaited_message(event, self._awaited, surface=NAME, **ids)
        if message is None:
            return
        key = ConversationKey(NAME, message.channel, message.thread)
        self._awaited.take(key, message.user)  # the first message ends the wait
        if message.thread and not message.is_dm:
            self._threads.remember((message.channel, message.thread), None)
        if message.team:
            self._streams.remember_recipient(key, message.user, message.team)
        self._home.saw(message.user, key, message.text)
        inbound = Inbound(
            key,
            UserRef(message.user, message.user_name),
            # `!compact`: the bot parses Slack's `!` spellings of ours; the agent's we translate
            agent_spelling(message.text, self._home.agent_names(key)),
            message.event_id,
            files=tuple(incoming(self._api, file) for file in message.files),
        )
        self._lanes.put(key, inbound)

    def file_from_ref(
        self, name: str, mime: str, size: int | None, kind: str, ref: str
    ) -> IncomingFile | None:
        """A file another replica received (its `IncomingFile.ref`), or None for a ref that is
        not one of ours."""
        return file_from_ref(self._api, name, mime, size, kind, ref)

    def _open_home(self, event: dict[str, Any]) -> None:
        """`app_home_opened`: publish that person's Home view (in the background)."""
        user = event.get("user")
        if not isinstance(user, str) or not user or event.get("tab", "home") != "home":
            return
        if self._tg is None:
            return
        try:
            self._tg.start_soon(self._home.publish, self._api, user)
        except RuntimeError:
            pass  # shutting down

    async def _hand_over(self, inbound: Inbound) -> None:
        assert self._on_event is not None
        await self._on_event(inbound)

    def _take_press(self, body: dict[str, Any]) -> None:
        """Bolt's listener for button presses (acknowledged): straight to the bot."""
        answer = answer_of(self._api, NAME, body)
        if answer is None or self._tg is None:
            return
        try:
            self._tg.start_soon(self._hand_over_press, answer)
        except RuntimeError:
            pass  # shutting down

    async def _hand_over_press(self, answer: ChoiceAnswer) -> None:
        assert self._on_event is not None
        try:
            await self._on_event(answer)
        except Exception:
            log.exception("slack: the bot failed on a button press")

    # ---- outbound -----------------------------------------------------------------------------
    async def send(
        self,
        key: ConversationKey,
        text: str,
        *,
        formatted: bool = False,
        buttons: Sequence[Choice] = (),
    ) -> MessageRef:
        if key.thread:
            self._threads.remember((key.chat, key.thread), None)
        shown = text if formatted else escape_angle_brackets(text)
        response = await self._api.call(
            key.chat,
            self._api.web.chat_postMessage,
            channel=key.chat,
            thread_ts=key.thread or None,
            unfurl_links=False,
            unfurl_media=False,
            **message_fields(shown, buttons),
        )
        return MessageRef(key, str(response["ts"]))

    async def edit(
        self,
        ref: MessageRef,
        text: str,
        *,
        formatted: bool = False,
        buttons: Sequence[Choice] = (),
    ) -> None:
        shown = text if formatted else escape_angle_brackets(text)
        # Whether it shows buttons is not known here: without buttons, any it had go.
        fields = message_fields(shown, buttons, clear=True)
        await self._api.call(
            ref.key.chat, self._api.web.chat_update, channel=ref.key.chat, ts=ref.id, **fields
        )

    def open_live(self, key: ConversationKey) -> LiveReply:
        """A reply streamed natively where Slack lets us (`live.py`)."""
        if key.thread:
            self._threads.remember((key.chat, key.thread), None)
        return SlackLive(self._streams, key, self.capabilities)

    async def send_file(self, key: ConversationKey, file: OutgoingFile) -> MessageRef:
        if key.thread:
            self._threads.remember((key.chat, key.thread), None)
        return MessageRef(key, await upload(self._api, key, file))

    async def agent_command_menu(
        self, key: ConversationKey, commands: Sequence[MenuCommand]
    ) -> None:
        # Slack has no per-conversation menu: `!name` is translated on the way in, and App
        # Home lists them. Nothing to call.
        self._home.set_agent_menu(key, commands)

    async def typing(self, key: ConversationKey) -> None:
        return None  # Slack has no typing indicator for bots (see the module docstring)

    # ---- choices ------------------------------------------------------------------------------
    async def ask_choice(
        self,
        key: ConversationKey,
        prompt: str,
        choices: Sequence[Choice],
        *,
        allowed_users: Sequence[str],
    ) -> MessageRef:
        response = await self._api.call(
            key.chat,
            self._api.web.chat_postMessage,
            channel=key.chat,
            thread_ts=key.thread or None,
            text=escape_angle_brackets(prompt),
            blocks=choice_blocks(prompt, choices),
            unfurl_links=False,
            unfurl_media=False,
        )
        return MessageRef(key, str(response["ts"]))

    async def ask_text(self, key: ConversationKey, prompt: str, *, user: UserRef) -> MessageRef:
        """The prompt, mentioning `user` in a channel; their next message awaited (`answers.py`)."""
        self._awaited.expect(key, user.id)  # before: an answer may beat the post's reply
        return await self.send(key, asking_text(key, prompt, user.id), formatted=True)

    def withdraw_text_ask(self, key: ConversationKey, *, user: UserRef) -> None:
        self._awaited.take(key, user.id)

    async def close_choice(self, ref: MessageRef, prompt: str, outcome: str) -> None:
        await self._api.call(
            ref.key.chat,
            self._api.web.chat_update,
            channel=ref.key.chat,
            ts=ref.id,
            text=escape_angle_brackets(f"{prompt}\n{outcome}" if prompt else outcome),
            blocks=closed_choice_blocks(prompt, outcome),
        )

    # ---- helpers ------------------------------------------------------------------------------
    def _in_known_thread(self, channel: str, thread: str) -> bool:
        """A channel thread the bot is part of (it wrote there, or was mentioned there)."""
        return (channel, thread) in self._threads

    def _bound(self, port: int) -> None:
        self.bound_port = port
