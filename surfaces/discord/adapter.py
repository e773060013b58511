"""The Discord surface on discord.py: the only module that imports `discord`.

Where conversations live: a DM is one conversation (its channel id). In a guild, a message that
mentions the bot in an allowed channel opens a thread on that message, and the thread is the
conversation: `ConversationKey("discord", <thread id>)`. A thread is a channel of its own on
Discord, with its own rate-limit buckets, so it is the chat (the bot paces per chat), not a
(channel, thread) pair; sending needs only its id. Later messages in a thread the bot opened go
on without a mention. People not on the allowlists get no thread (the bot drops their message,
logging them once), and no interaction answer: strangers get silence.

Order: events of one conversation are handed to the bot one at a time, in arrival order, each
conversation in its own lane; button presses skip the lanes (they must be answered at once).

Slash commands (synced from the bot's command table at start-up) are acknowledged at once with a
deferred ("thinking…") response, ephemeral for /status, /help and /model. The command then
reaches the bot as text (`/model ID`) and the bot's answer must become that interaction's
followup. The surface API has no "reply to this event" argument, so the lane hands the event to
the bot with a context variable naming the deferred interaction: whatever the bot sends for that
conversation from the resulting work (the command's answer, a "queued" receipt, or the turn a
/compact starts, since tasks inherit the context they are started from) goes out as the followup;
the first such send takes it, later ones go to the channel. Edits of a followup go through the
interaction's webhook. A followup that cannot be sent (token expired after 15 minutes) falls back
to an ordinary message.

Approvals: buttons in a view whose custom ids are the bot's one-time tokens. discord.py's view
store is not used (the view is stopped before sending): every press arrives in `on_interaction`,
also after a restart, and goes to the bot as a `ChoiceAnswer`. A press by someone the choice
does not name is answered with an ephemeral notice (the bot's refusal text, or ours if it says
nothing); a press by someone it names is acknowledged silently and the bot's outcome edits the
message, removing the buttons.

Rate limits: the bot paces each chat (`min_edit_interval`, about one call a second, Discord's
per-channel budget); discord.py follows the `X-RateLimit-*` headers of each bucket; and a
surface-wide budget keeps all calls under Discord's global limit (50 a second; 429s count toward
a temporary ban), serving new messages before edits, so with many conversations streaming at
once each one's edits thin out (the bot coalesces them) instead of drawing 429s.

Pointing at other endpoints (tests): `api_url` and `gateway_url` are applied per client, by
rebasing each request's URL in this client's HTTP object and this surface's interaction webhook
calls (discord.py keeps the webhook adapter in a context variable, set around our calls).

Errors are translated here: 429 -> RateLimited (discord.py itself waits out and retries short
429s that carry `Via`), 403 and 4xx -> SendFailed(transient=False), 5xx and network trouble ->
SendFailed(transient=True), 404 on an edit -> MessageGone. A rejected token or a missing Message
Content intent is a ConfigError naming the setting."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
import warnings
from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import aiohttp
import anyio
import anyio.abc
import yarl

with warnings.catch_warnings():
    # discord.py imports `audioop` for voice, which we never use; 3.11 warns on that import.
    warnings.filterwarnings("ignore", message=".*audioop.*", category=DeprecationWarning)
    import discord
    from discord.gateway import DiscordWebSocket
    from discord.http import Route
    from discord.webhook.async_ import AsyncWebhookAdapter, async_context

from config import ConfigError
from config.settings import DiscordSettings
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
from surfaces.discord.convert import (
    MAX_BUTTONS,
    MAX_CHARS,
    button_label,
    closed_choice_text,
    command_payloads,
    command_text,
    fit,
    is_ephemeral,
    mentions,
    plain,
    render,
    strip_mention,
    thread_name,
)
from surfaces.errors import MessageGone, RateLimited, SendFailed
from surfaces.pacing import GlobalBudget
from surfaces.recovered_faults import RecoveredFaults, tame

log = logging.getLogger(__name__)

NAME = "discord"
NO_MENTIONS = discord.AllowedMentions.none()
ACK_DEADLINE = 2.5  # Discord's is 3 s; past it the interaction token is refused
FOLLOWUP_TTL = 14 * 60.0  # interaction tokens last 15 minutes
COMMAND_SYNC_TIMEOUT = 10.0
CLOSE_TIMEOUT = 5.0
THREAD_ARCHIVE_MINUTES: Literal[1440] = 1440  # a day without messages
NOT_YOURS = "This choice is not yours to answer."
NOT_HERE = "Switchboard does not answer in this channel; use a DM or a channel it serves."
GLOBAL_RATE = 45.0  # requests a second for the whole bot; Discord's limit is 50
NEW_MESSAGE, EDIT = 0, 1  # priorities for the global budget


def _gateway_reconnect(record: logging.LogRecord, fault: BaseException | None) -> bool:
    """discord.py logs these (as errors with a traceback) right before it reconnects and
    resumes the gateway by itself, after a dropped connection or a timeout."""
    return isinstance(record.msg, str) and record.msg.startswith(
        ("Attempting a reconnect", "Failed to connect for shard_id")
    )


_GATEWAY_RECONNECTS = RecoveredFaults("discord", _gateway_reconnect)
_STYLES = {
    "primary": discord.ButtonStyle.primary,
    "danger": discord.ButtonStyle.danger,
    "default": discord.ButtonStyle.secondary,
}
_NETWORK_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)


@dataclass(eq=False)
class _Followup:
    """A slash command acknowledged with "thinking…", waiting for the bot's answer."""

    interaction: discord.Interaction[Any]
    key: ConversationKey
    ephemeral: bool
    created: float = field(default_factory=time.monotonic)
    used: bool = False

    def fresh(self) -> bool:
        return time.monotonic() - self.created < FOLLOWUP_TTL

    def takes(self, key: ConversationKey) -> bool:
        return not self.used and self.key == key and self.fresh()


# The deferred interaction whose answer the current work produces (see the module docstring).
_FOLLOWUP: contextvars.ContextVar[_Followup | None] = contextvars.ContextVar(
    "switchboard_discord_followup", default=None
)


@dataclass(eq=False)
class _Pending:
    """One event waiting in its conversation's lane; `ready` once it may be handed over."""

    event: Inbound
    followup: _Followup | None = None
    ready: anyio.Event = field(default_factory=anyio.Event)


@dataclass(frozen=True, slots=True)
class _OpenChoice:
    key: ConversationKey
    allowed: frozenset[str]


def _rebase(url: str, base: str) -> str:
    return base + url[len(Route.BASE) :] if url.startswith(Route.BASE) else url


class _RebasedWebhooks(AsyncWebhookAdapter):
    """discord.py's webhook adapter (interaction callbacks, followups) against another base."""

    def __init__(self, base: str) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._base = base

    async def request(self, route: Route, session: aiohttp.ClientSession, **kwargs: Any) -> Any:
        route.url = _rebase(route.url, self._base)
        return await super().request(route, session, **kwargs)


@contextlib.contextmanager
def _translated(*, editing: bool = False) -> Iterator[None]:
    """discord.py and network failures -> our SurfaceError family."""
    try:
        yield
    except discord.RateLimited as exc:
        raise RateLimited(exc.retry_after) from exc
    except discord.NotFound as exc:
        if editing:
            raise MessageGone(f"Discord: {exc.text or exc}") from exc
        raise SendFailed(f"Discord: {exc.text or exc}", transient=False) from exc
    except discord.HTTPException as exc:
        if exc.status == 429:  # not retried by discord.py (no `Via`: a Cloudflare limit)
            raise RateLimited(_retry_after(exc)) from exc
        transient = exc.status >= 500
        raise SendFailed(f"Discord {exc.status}: {exc.text or exc}", transient=transient) from exc
    except _NETWORK_ERRORS as exc:
        raise SendFailed(f"cannot reach Discord: {exc!r}", transient=True) from exc


def _retry_after(exc: discord.HTTPException) -> float:
    try:
        return float(exc.response.headers.get("Retry-After", "1"))
    except (AttributeError, ValueError):
        return 1.0


class DiscordSurface:
    name = NAME

    def __init__(
        self,
        settings: DiscordSettings,
        *,
        min_edit_interval: float = 1.0,
        guild_ready_timeout: float = 2.0,
        global_rate: float = GLOBAL_RATE,
    ) -> None:
        self.settings = settings
        self.capabilities = SurfaceCapabilities(
            max_chars=MAX_CHARS,
            min_edit_interval=min_edit_interval,
            can_edit=True,
            drafts=False,
            buttons=True,
            threads=True,
            command_prefixes=("!", "/"),
        )
        self._guild_ready_timeout = guild_ready_timeout
        self._budget = GlobalBudget(global_rate)  # the whole bot's requests a second
        # Everyone the bot may answer: used only to give strangers nothing (no thread, no ack);
        # the bot's access policy decides everything else.
        self._known = frozenset([*settings.allowed_users, *settings.approvers, *settings.admins])
        self._guilds = frozenset(settings.allowed_guilds)
        self._channels = frozenset(settings.allowed_channels)
        self._api = settings.api_url.rstrip("/")
        self._webhooks = _RebasedWebhooks(self._api) if self._api else None
        self._client: discord.Client | None = None
        self._on_event: OnEvent | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._receiving = False
        self._commands: list[tuple[str, str]] = []
        self._lanes: dict[ConversationKey, deque[_Pending]] = {}
        self._threads: dict[int, int] = {}  # threads we opened -> their parent channel
        self._followups: OrderedDict[int, _Followup] = OrderedDict()  # followup message id ->
        self._choices: dict[int, _OpenChoice] = {}  # approval message id ->

    # ---- the client ---------------------------------------------------------------------------
    def _build_client(self) -> discord.Client:
        # Voice is never used: no start-up warnings about its optional libraries.
        discord.VoiceClient.warn_nacl = False
        discord.VoiceClient.warn_dave = False
        intents = discord.Intents.none()
        intents.guilds = True  # the channel and thread cache
        intents.guild_messages = True
        intents.dm_messages = True
        intents.message_content = True  # privileged: enable it in the Developer Portal
        client: discord.Client
        if self.settings.shard_count > 0:
            client = discord.AutoShardedClient(
                intents=intents,
                shard_count=self.settings.shard_count,
                allowed_mentions=NO_MENTIONS,
                guild_ready_timeout=self._guild_ready_timeout,
                chunk_guilds_at_startup=False,
                max_messages=None,
                max_ratelimit_timeout=30.0,
            )
        else:
            client = discord.Client(
                intents=intents,
                allowed_mentions=NO_MENTIONS,
                guild_ready_timeout=self._guild_ready_timeout,
                chunk_guilds_at_startup=False,
                max_messages=None,
                max_ratelimit_timeout=30.0,
            )
        self._point_at_endpoints(client)
        setattr(client, "on_ready", self._on_ready)  # noqa: B010 - discord.py looks them up
        setattr(client, "on_resumed", self._on_resumed)  # noqa: B010
        setattr(client, "on_message", self._on_message)  # noqa: B010
        setattr(client, "on_interaction", self._on_interaction)  # noqa: B010
        return client

    def _point_at_endpoints(self, client: discord.Client) -> None:
        http = client.http
        if self._api:
            base = self._api
            send = http.request

            async def request(route: Route, **kwargs: Any) -> Any:
                route.url = _rebase(route.url, base)
                return await send(route, **kwargs)

            setattr(http, "request", request)  # noqa: B010
        if self.settings.gateway_url:
            gateway = yarl.URL(self.settings.gateway_url)
            default = str(DiscordWebSocket.DEFAULT_GATEWAY)
            connect = http.ws_connect

            async def ws_connect(url: str, *, compress: int = 0) -> Any:
                if url.startswith(default):  # a resume goes where READY said, untouched
                    url = str(gateway.with_query(yarl.URL(url).query))
                return await connect(url, compress=compress)

            setattr(http, "ws_connect", ws_connect)  # noqa: B010

    @contextlib.contextmanager
    def _webhook_calls(self) -> Iterator[None]:
        """Around interaction responses and followups: discord.py takes the webhook adapter
        from a context variable."""
        if self._webhooks is None:
            yield
            return
        token = async_context.set(self._webhooks)
        try:
            yield
        finally:
            async_context.reset(token)

    def _running_client(self) -> discord.Client:
        client = self._client
        if client is None or client.is_closed():
            raise SendFailed("the Discord client is not running", transient=False)
        return client

    def is_ready(self) -> bool:
        """Connected, with the guilds loaded."""
        return self._client is not None and self._client.is_ready()

    # ---- lifecycle ----------------------------------------------------------------------------
    async def run(
        self,
        on_event: OnEvent,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Log in, sync the slash commands, then receive until cancelled. The client stays open
        after a cancel, for the bot's last replies; `close()` ends it."""
        client = self._client = self._build_client()
        self._on_event = on_event
        for logger in ("discord.client", "discord.shard"):
            tame(logger, _GATEWAY_RECONNECTS)
        try:
            await self._login(client)
            async with anyio.create_task_group() as tg:
                self._tg = tg
                self._receiving = True
                tg.start_soon(self._connect, client)
                with anyio.move_on_after(COMMAND_SYNC_TIMEOUT):
                    await self._sync_commands(client)
                task_status.started()
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._close_client(client)
            raise
        finally:
            self._receiving = False
            self._tg = None

    async def _login(self, client: discord.Client) -> None:
        try:
            await client.login(self.settings.token)
        except discord.LoginFailure as exc:
            raise ConfigError("SWITCHBOARD_DISCORD__TOKEN", "Discord rejected the token") from exc
        except (discord.HTTPException, *_NETWORK_ERRORS) as exc:
            raise SendFailed(f"cannot log in to Discord: {exc!r}", transient=True) from exc

    async def _connect(self, client: discord.Client) -> None:
        try:
            await client.connect(reconnect=True)  # reconnects and resumes by itself
        except discord.PrivilegedIntentsRequired as exc:
            raise ConfigError(
                "SWITCHBOARD_DISCORD__TOKEN",
                "this bot may not read message content: enable the Message Content intent in "
                "the Discord Developer Portal (Bot, Privileged Gateway Intents)",
            ) from exc
        except discord.ConnectionClosed as exc:
            if exc.code == 4004:
                raise ConfigError(
                    "SWITCHBOARD_DISCORD__TOKEN", "Discord rejected the token"
                ) from exc
            raise SendFailed(
                f"the Discord gateway closed the connection ({exc.code}: {exc.reason})",
                transient=False,
            ) from exc

    async def _sync_commands(self, client: discord.Client) -> None:
        application = client.application_id
        if not self._commands or application is None:
            return
        payload = command_payloads(self._commands)
        try:
            await client.http.bulk_upsert_global_commands(application, cast(Any, payload))
        except (discord.DiscordException, *_NETWORK_ERRORS) as exc:
            log.warning("could not register the slash commands (! commands still work): %s", exc)

    async def _close_client(self, client: discord.Client) -> None:
        if not client.is_closed():
            with anyio.move_on_after(CLOSE_TIMEOUT):
                await client.close()

    async def close(self) -> None:
        self._receiving = False
        if self._client is not None:
            with anyio.CancelScope(shield=True):
                await self._close_client(self._client)

    def command_menu(self, commands: Sequence[tuple[str, str]]) -> Any:
        self._commands = list(commands)
        if self._tg is not None and self._client is not None:
            self._tg.start_soon(self._sync_commands, self._client)
        return None

    # ---- inbound: messages --------------------------------------------------------------------
    async def _on_ready(self) -> None:
        client = self._client
        log.info("connected to Discord as %s", client.user if client else "?")

    async def _on_resumed(self) -> None:
        log.info("Discord gateway session resumed")

    async def _on_message(self, message: discord.Message) -> None:
        client = self._client
        me = client.user if client is not None else None
        if not self._receiving or me is None:
            return
        if message.author.bot or message.webhook_id is not None:
            return  # our own messages, other bots, webhooks
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return  # joins, pins, thread-created notices
        channel = message.channel
        user = UserRef(str(message.author.id), message.author.display_name)
        mentioned = mentions(message.content, me.id) or any(u.id == me.id for u in message.mentions)
        text = strip_mention(message.content, me.id)  # `!compact`: the bot parses `!` itself
        if not text:
            return
        guild = message.guild
        guild_id = guild.id if guild is not None else getattr(channel, "guild_id", None)
        if guild_id is None:  # a DM
            key = ConversationKey(NAME, str(channel.id))
            self._enqueue(Inbound(key, user, text, str(message.id)))
            return
        if self._guilds and str(guild_id) not in self._guilds:
            return
        parent = self._thread_parent(channel, me.id)
        if parent is not None:  # a thread: ours continue without a mention
            ours, parent_id = parent
            if (ours or mentioned) and self._channel_allowed(parent_id):
                key = ConversationKey(NAME, str(channel.id))
                self._enqueue(Inbound(key, user, text, str(message.id)))
            return
        if not mentioned or not self._channel_allowed(channel.id):
            return
        if user.id not in self._known:
            # The bot drops it (and logs the stranger once); no thread, no reply.
            key = ConversationKey(NAME, str(channel.id))
            self._enqueue(Inbound(key, user, text, str(message.id)))
            return
        if self._tg is not None:
            self._tg.start_soon(self._open_thread, message, user, text)

    def _thread_parent(self, channel: Any, me: int) -> tuple[bool, int] | None:
        """(opened by us, parent channel id) if `channel` is a thread, else None."""
        if channel.id in self._threads:
            return True, self._threads[channel.id]
        if isinstance(channel, discord.Thread):
            return channel.owner_id == me, channel.parent_id
        return None

    def _channel_allowed(self, channel_id: int) -> bool:
        return not self._channels or str(channel_id) in self._channels

    async def _open_thread(self, message: discord.Message, user: UserRef, text: str) -> None:
        try:
            await self._budget.take(NEW_MESSAGE)
            thread = await message.create_thread(
                name=thread_name(text, f"Chat with {user.label}"),
                auto_archive_duration=THREAD_ARCHIVE_MINUTES,
            )
        except (discord.DiscordException, ValueError, *_NETWORK_ERRORS) as exc:
            log.warning(
                "could not open a thread in channel %s (%s); answering in the channel",
                message.channel.id,
                exc,
            )
            key = ConversationKey(NAME, str(message.channel.id))
        except Exception:  # unmapped: logged with its traceback; the message is still answered
            log.exception("opening a thread in channel %s failed unexpectedly", message.channel.id)
            key = ConversationKey(NAME, str(message.channel.id))
        else:
            self._threads[thread.id] = message.channel.id
            key = ConversationKey(NAME, str(thread.id))
        self._enqueue(Inbound(key, user, text, str(message.id)))

    # ---- lanes: one conversation's events in order --------------------------------------------
    def _enqueue(self, event: Inbound, followup: _Followup | None = None) -> _Pending:
        pending = _Pending(event, followup)
        if followup is None:
            pending.ready.set()
        if self._tg is None:
            return pending  # not running any more: dropped
        lane = self._lanes.get(event.key)
        if lane is None:
            lane = self._lanes[event.key] = deque()
            self._tg.start_soon(self._drain, event.key, lane)
        lane.append(pending)
        return pending

    async def _drain(self, key: ConversationKey, lane: deque[_Pending]) -> None:
        try:
            while lane:
                pending = lane[0]
                await pending.ready.wait()
                lane.popleft()
                token = _FOLLOWUP.set(pending.followup)
                try:
                    await self._hand_over(pending.event)
                finally:
                    _FOLLOWUP.reset(token)
        finally:
            if self._lanes.get(key) is lane:
                del self._lanes[key]

    async def _hand_over(self, event: Inbound | ChoiceAnswer) -> None:
        if self._on_event is None:
            return
        try:
            await self._on_event(event)
        except Exception:
            log.exception("the bot failed on a Discord event in %s", event.key)

    # ---- inbound: interactions ----------------------------------------------------------------
    async def _on_interaction(self, interaction: discord.Interaction[Any]) -> None:
        if not self._receiving:
            return
        user = interaction.user
        if user is None or user.bot:
            return
        who = UserRef(str(user.id), user.display_name)
        if interaction.type is discord.InteractionType.application_command:
            await self._on_command(interaction, who)
        elif interaction.type is discord.InteractionType.component:
            await self._on_press(interaction, who)

    def _interaction_key(self, interaction: discord.Interaction[Any]) -> ConversationKey | None:
        """The conversation an interaction belongs to, or None where the bot does not serve."""
        channel_id = interaction.channel_id
        if channel_id is None:
            return None
        if interaction.guild_id is None:
            return ConversationKey(NAME, str(channel_id))
        if self._guilds and str(interaction.guild_id) not in self._guilds:
            return None
        me = self._client.user.id if self._client and self._client.user else 0
        parent = self._thread_parent(interaction.channel or _Channel(channel_id), me)
        place = parent[1] if parent is not None else channel_id
        return ConversationKey(NAME, str(channel_id)) if self._channel_allowed(place) else None

    async def _on_command(self, interaction: discord.Interaction[Any], who: UserRef) -> None:
        key = self._interaction_key(interaction)
        if key is None:
            if who.id in self._known:  # strangers get silence; people we know get a reason
                await self._say_not_here(interaction)
            return
        data = cast(dict[str, Any], interaction.data or {})
        name = str(data.get("name", ""))
        options = [(str(o.get("name", "")), o.get("value")) for o in data.get("options", [])]
        inbound = Inbound(key, who, command_text(name, options), str(interaction.id))
        if who.id not in self._known:
            self._enqueue(inbound)  # the bot drops it; not even "thinking…" for strangers
            return
        followup = _Followup(interaction, key, ephemeral=is_ephemeral(name))
        pending = self._enqueue(inbound, followup)  # its place in the lane, before the ack
        try:
            with anyio.move_on_after(ACK_DEADLINE) as scope, self._webhook_calls():
                await interaction.response.defer(ephemeral=followup.ephemeral, thinking=True)
            if scope.cancelled_caught:
                raise TimeoutError("no answer to the acknowledgement")
        except (discord.DiscordException, *_NETWORK_ERRORS) as exc:
            log.warning("could not acknowledge /%s: %s; answering in the channel", name, exc)
            followup.used = True
        finally:
            pending.ready.set()

    async def _on_press(self, interaction: discord.Interaction[Any], who: UserRef) -> None:
        data = cast(dict[str, Any], interaction.data or {})
        token = str(data.get("custom_id", ""))
        message = interaction.message
        opened = self._choices.get(message.id) if message is not None else None
        key = opened.key if opened is not None else self._interaction_key(interaction)
        if key is None or not token:
            return
        event_id = str(interaction.id)
        if who.id not in self._known:
            await self._hand_over(ChoiceAnswer(key, who, token, event_id))  # dropped, silently
            return
        theirs = opened is None or who.id in opened.allowed
        told = False

        async def notify(text: str) -> None:
            nonlocal told
            told = True
            try:
                with self._webhook_calls():
                    await interaction.followup.send(
                        fit(plain(text)), ephemeral=True, allowed_mentions=NO_MENTIONS
                    )
            except (discord.DiscordException, *_NETWORK_ERRORS) as exc:
                log.warning("could not tell %s about their button press: %s", who.id, exc)

        try:
            # Someone the choice names: acknowledged silently, the outcome edits the message.
            # Anyone else: an ephemeral "thinking…" that the notice below replaces.
            with anyio.move_on_after(ACK_DEADLINE), self._webhook_calls():
                await interaction.response.defer(ephemeral=True, thinking=not theirs)
        except (discord.DiscordException, *_NETWORK_ERRORS) as exc:
            log.warning("could not acknowledge a button press: %s", exc)
        await self._hand_over(ChoiceAnswer(key, who, token, event_id, notify))
        if not theirs and not told:
            await notify(NOT_YOURS)

    async def _say_not_here(self, interaction: discord.Interaction[Any]) -> None:
        try:
            with anyio.move_on_after(ACK_DEADLINE), self._webhook_calls():
                await interaction.response.send_message(
                    NOT_HERE, ephemeral=True, allowed_mentions=NO_MENTIONS
                )
        except (discord.DiscordException, *_NETWORK_ERRORS) as exc:
            log.warning("could not answer a command in a place the bot does not serve: %s", exc)

    # ---- outbound -----------------------------------------------------------------------------
    def _messageable(self, key: ConversationKey) -> discord.PartialMessageable:
        return self._running_client().get_partial_messageable(int(key.chat))

    def render(self, markdown: str) -> str:
        return render(markdown)

    @staticmethod
    def _content(text: str, formatted: bool) -> str:
        return fit(text if formatted else plain(text))

    async def send(self, key: ConversationKey, text: str, *, formatted: bool = False) -> MessageRef:
        content = self._content(text, formatted)
        followup = _FOLLOWUP.get()
        if followup is not None and followup.takes(key):
            followup.used = True
            ref = await self._send_followup(followup, content)
            if ref is not None:
                return ref
        channel = self._messageable(key)
        await self._budget.take(NEW_MESSAGE)
        with _translated():
            message = await channel.send(content, allowed_mentions=NO_MENTIONS)
        return MessageRef(key, str(message.id))

    async def _send_followup(self, followup: _Followup, content: str) -> MessageRef | None:
        try:
            with self._webhook_calls():
                message = await followup.interaction.followup.send(
                    content,
                    ephemeral=followup.ephemeral,
                    allowed_mentions=NO_MENTIONS,
                    wait=True,
                )
        except discord.HTTPException as exc:  # the token expired or was refused
            log.warning("could not answer the slash command (%s); answering in the channel", exc)
            return None
        except _NETWORK_ERRORS as exc:
            raise SendFailed(f"cannot reach Discord: {exc!r}", transient=True) from exc
        self._followups[message.id] = followup
        while self._followups:  # forget followups whose tokens have expired
            oldest = next(iter(self._followups.values()))
            if oldest.fresh():
                break
            self._followups.popitem(last=False)
        return MessageRef(followup.key, str(message.id))

    async def edit(self, ref: MessageRef, text: str, *, formatted: bool = False) -> None:
        content = self._content(text, formatted)
        message_id = int(ref.id)
        followup = self._followups.get(message_id)
        if followup is not None and followup.fresh():
            with self._webhook_calls(), _translated(editing=True):
                await followup.interaction.followup.edit_message(
                    message_id, content=content, allowed_mentions=NO_MENTIONS
                )
            return
        message = self._messageable(ref.key).get_partial_message(message_id)
        await self._budget.take(EDIT)
        with _translated(editing=True):
            await message.edit(content=content, allowed_mentions=NO_MENTIONS)

    async def preview(self, key: ConversationKey, text: str) -> None:
        return None  # Discord has no drafts: the bot streams by editing

    async def ask_choice(
        self,
        key: ConversationKey,
        prompt: str,
        choices: Sequence[Choice],
        *,
        allowed_users: Sequence[str],
    ) -> MessageRef:
        content = fit(plain(prompt))
        view = discord.ui.View(timeout=None)
        if len(choices) > MAX_BUTTONS:
            log.warning("showing %d of %d options as buttons", MAX_BUTTONS, len(choices))
        for choice in choices[:MAX_BUTTONS]:
            view.add_item(
                discord.ui.Button(
                    label=button_label(choice.label),
                    custom_id=choice.token,
                    style=_STYLES.get(choice.style, discord.ButtonStyle.secondary),
                )
            )
        view.stop()  # presses come to on_interaction, not to discord.py's view store
        channel = self._messageable(key)
        await self._budget.take(NEW_MESSAGE)
        with _translated():
            message = await channel.send(content, view=view, allowed_mentions=NO_MENTIONS)
        self._choices[message.id] = _OpenChoice(key, frozenset(allowed_users))
        return MessageRef(key, str(message.id))

    async def close_choice(self, ref: MessageRef, prompt: str, outcome: str) -> None:
        self._choices.pop(int(ref.id), None)  # no more presses to check
        content = closed_choice_text(fit(plain(prompt)), outcome)
        message = self._messageable(ref.key).get_partial_message(int(ref.id))
        await self._budget.take(NEW_MESSAGE)  # an approval's outcome: as urgent as a message
        with _translated(editing=True):
            await message.edit(content=content, view=None, allowed_mentions=NO_MENTIONS)

    async def typing(self, key: ConversationKey) -> None:
        followup = _FOLLOWUP.get()
        if followup is not None and followup.takes(key):
            return  # the deferred answer already shows "thinking…"
        channel = self._messageable(key)
        if not self._budget.take_if_free():
            return  # busy: the text itself is on its way
        with _translated():
            await channel.typing()


@dataclass(frozen=True, slots=True)
class _Channel:
    """A channel known only by id (not in discord.py's cache)."""

    id: int
