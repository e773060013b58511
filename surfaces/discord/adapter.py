"""The Discord surface on discord.py. With `gateway.py` (the client and its start-up),
`interactions.py` (slash commands answered by followups, buttons), `places.py` (where
conversations live) and `errors.py`, the only code that imports `discord`.

Conversations: a DM is one; in a guild, a mention in a channel the bot serves opens a thread, and
the thread is one (`places.py`). People not on the allowlists get no thread (the bot drops their
message, logging them once), and no interaction answer: strangers get silence.

Order: events of one conversation are handed to the bot one at a time, in arrival order, each
conversation in its own lane (`surfaces.lanes`); a slash command waits in its lane until it is
acknowledged (`interactions.py`). Button presses skip the lanes: they must be answered at once.

Approvals: buttons whose presses come to `on_interaction` and go to the bot as a `ChoiceAnswer`
(`interactions.py`); the bot's outcome edits the message, removing the buttons. A message's own
buttons (the live reply's Stop) are the same kind of component row, pressed the same way; an
edit without buttons removes them.

Files: a message's attachments reach the bot as `IncomingFile`s, and the bot's files go out as
attachments within the place's upload limit (`files.py`). The agent's own commands become guild
application commands (`agent_menus.py`).

Rate limits: the bot paces each chat (`min_edit_interval`: Discord's per-channel budget is about
a call a second); discord.py follows each bucket's `X-RateLimit-*` headers; `spending.py` keeps
all calls under Discord's global limit, the answers first, so with many conversations streaming
their live edits thin out instead of drawing 429s. Errors are translated by `errors.py`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import anyio
import anyio.abc
import yarl

from config import ConfigError
from config.settings import DiscordSettings
from surfaces.base import (
    Choice,
    ChoiceAnswer,
    ClusterLeases,
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
from surfaces.discord.agent_menus import AgentMenus
from surfaces.discord.convert import (
    MAX_CHARS,
    closed_choice_text,
    command_argument,
    command_text,
    fit,
    is_ephemeral,
    mentions,
    plain,
    render,
    strip_mention,
    thread_name,
)
from surfaces.discord.errors import EDITS, FILES, REST, SDK_FAILURES
from surfaces.discord.files import (
    CDN_HOSTS,
    UPLOAD_LIMIT,
    file_from_ref,
    incoming_files,
    too_large,
    upload,
)
from surfaces.discord.gateway import (
    CLOSE_TIMEOUT,
    NO_MENTIONS,
    build_client,
    close_client,
    disconnect_shard,
    log_in,
    stay_connected,
    sync_commands,
    tame_reconnect_logs,
)
from surfaces.discord.interactions import (
    Followup,
    Interactions,
    Notify,
    answering,
    current_followup,
)
from surfaces.discord.interactions import buttons as button_row
from surfaces.discord.places import NAME, Places, conversation_key
from surfaces.discord.sdk import discord
from surfaces.discord.shards import ShardLeases
from surfaces.discord.spending import Spending
from surfaces.errors import FileRefused, SendFailed
from surfaces.lanes import Lanes
from surfaces.live import EditedLive
from surfaces.text import ellipsize

log = logging.getLogger(__name__)

COMMAND_SYNC_TIMEOUT = 10.0
RESHARD_LOGIN_TIMEOUT = 15.0  # a new client's log-in, when this replica takes more shards
MENU_COALESCE = 2.0  # seconds an agent command update waits for the rest of its burst
CAPTION_CHARS = 500  # a file's caption: a line, not a message
THREAD_ARCHIVE_MINUTES: Literal[1440] = 1440  # a day without messages
GUILDS_REMEMBERED = 10_000  # conversations whose guild is known without a cache lookup
GLOBAL_RATE = 45.0  # requests a second for the whole bot; Discord's limit is 50
# Why a thread may not open (ValueError: a name discord.py refuses); the channel answers instead.
_THREAD_FAILURES: tuple[type[Exception], ...] = (*SDK_FAILURES, ValueError)
# Why a new client for more shards may not log in (the old one then keeps its shards).
_RESHARD_FAILURES: tuple[type[Exception], ...] = (
    *SDK_FAILURES,
    TimeoutError,
    ConfigError,
    SendFailed,
)


@dataclass(eq=False)
class _Pending:
    """One event waiting in its conversation's lane; `ready` once it may be handed over (a
    slash command: once acknowledged), answering `followup` if it has one."""

    event: Inbound
    followup: Followup | None = None
    ready: anyio.Event = field(default_factory=anyio.Event)


@dataclass(frozen=True, slots=True)
class _OpenChoice:
    """An approval on show: where, and who may press its buttons."""

    key: ConversationKey
    allowed: frozenset[str]


class DiscordSurface:
    name = NAME

    # ---- capabilities --------------------------------------------------------------------------
    def __init__(
        self,
        settings: DiscordSettings,
        *,
        min_edit_interval: float = 1.0,
        guild_ready_timeout: float = 2.0,
        global_rate: float = GLOBAL_RATE,
        menu_coalesce: float = MENU_COALESCE,
    ) -> None:
        self.settings = settings
        self.capabilities = SurfaceCapabilities(
            max_chars=MAX_CHARS,
            min_edit_interval=min_edit_interval,
            can_edit=True,
            command_prefixes=("!", "/"),
            message_buttons=True,
            max_upload_bytes=UPLOAD_LIMIT,  # a boosted guild allows more: see send_file
            max_download_bytes=0,  # Discord's CDN sets no limit of its own
            agent_menus=True,
        )
        self._guild_ready_timeout = guild_ready_timeout
        self._spending = Spending(global_rate)  # the whole bot's requests a second
        # Everyone the bot may answer: used only to give strangers nothing (no thread, no ack);
        # the bot's access policy decides everything else.
        self._known = frozenset([*settings.allowed_users, *settings.approvers, *settings.admins])
        self._places = Places(settings)
        self._interactions = Interactions(settings.api_url.rstrip("/"))
        self._lanes: Lanes[ConversationKey, _Pending] = Lanes(
            self._deliver, failure="the bot failed on a Discord event in %s", logger=log
        )
        self._client: discord.Client | None = None
        self._leases: ClusterLeases | None = None
        self._shard_leases: ShardLeases | None = None
        self._shards: frozenset[int] = frozenset()  # connected, with shard leases
        self._connecting = False  # the client's gateway connection was started
        self._on_event: OnEvent | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._receiving = False
        self._commands: list[tuple[str, str]] = []
        self._choices: dict[int, _OpenChoice] = {}  # approval message id ->
        self._menus = AgentMenus(coalesce=menu_coalesce)
        self._guilds: BoundedMap[str, int] = BoundedMap(GUILDS_REMEMBERED)  # chat -> its guild
        # Where attachments may be downloaded from: Discord's CDN (and the API host in tests).
        api_host = yarl.URL(settings.api_url).host if settings.api_url else None
        self._file_hosts = CDN_HOSTS | ({api_host} if api_host else set())

    def render(self, markdown: str) -> str:
        return render(markdown)

    def command_menu(self, commands: Sequence[tuple[str, str]]) -> Any:
        """Remembered, and synced as slash commands (now, if connected, else at start-up)."""
        self._commands = list(commands)
        if self._tg is not None and self._client is not None:
            self._tg.start_soon(sync_commands, self._client, self._commands)
        return None

    # ---- lifecycle -----------------------------------------------------------------------------
    async def run(
        self,
        on_event: OnEvent,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Log in, sync the slash commands, then receive until cancelled. The client stays open
        after a cancel, for the bot's last replies; `close()` ends it."""
        leases = self._leases
        # With shard leases the client starts with no shard: `shards.py` says which to connect.
        client = self._client = self._new_client(None if leases is None else ())
        self._on_event = on_event
        tame_reconnect_logs()
        try:
            await log_in(client, self.settings.token)
            async with anyio.create_task_group() as tg:
                self._tg = tg
                self._lanes.open(tg)
                self._receiving = True
                if leases is None:
                    tg.start_soon(stay_connected, client)
                    self._connecting = True
                with anyio.move_on_after(COMMAND_SYNC_TIMEOUT):
                    await sync_commands(client, self._commands)
                tg.start_soon(self._menus.publish, self._current, self._our_names, self._spend_slot)
                if leases is not None:
                    tg.start_soon(self._follow_shard_leases, leases, client)
                task_status.started()
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException:
            with anyio.CancelScope(shield=True):
                await close_client(client)
            raise
        finally:
            self._receiving = False
            self._lanes.close()
            self._tg = None

    def _new_client(self, shard_ids: Sequence[int] | None) -> discord.Client:
        return build_client(
            self.settings,
            guild_ready_timeout=self._guild_ready_timeout,
            handlers={"on_message": self._on_message, "on_interaction": self._on_interaction},
            shard_ids=shard_ids,
        )

    def _current(self) -> discord.Client | None:
        return self._client

    def set_leases(self, leases: ClusterLeases) -> None:
        """Several replicas share this bot: each connects only the shards whose lease it holds
        (`shards.py`); shard_count 0 counts as one shard."""
        self._leases = leases

    async def _follow_shard_leases(self, leases: ClusterLeases, client: discord.Client) -> None:
        application = client.application_id
        if application is None:  # discord.py learns it at log-in; without it no lease name
            log.error("discord: no application id after the log-in; connecting no shard")
            return
        shards = ShardLeases(
            leases,
            application,
            max(1, self.settings.shard_count),
            connect=self._reshard,
            stop_timeout=CLOSE_TIMEOUT,
        )
        self._shard_leases = shards
        await shards.run()

    async def _reshard(self, shards: frozenset[int]) -> frozenset[int]:
        """Connect exactly `shards`; the shards connected afterwards. Fewer: the others are
        disconnected, the client stays. More (or one to drop that is still connecting):
        discord.py cannot change a connected client's shards, so a new client is logged in
        (sending moves to it), then the old one is closed before the new one connects, so no
        shard is ever connected twice from here."""
        client, now = self._client, self._shards
        if client is None or client.is_closed():
            return frozenset()
        launched = set(client.shards) if isinstance(client, discord.AutoShardedClient) else set()
        if shards <= now and (now - shards) <= launched:
            for shard in sorted(now - shards):
                await disconnect_shard(client, shard)
            self._shards = shards
            return shards
        tg = self._tg
        if tg is None and shards:  # stopping: connect nothing more
            return now
        if not self._connecting:  # never connected yet: it reads its shard ids when it does
            cast(discord.AutoShardedClient, client).shard_ids = sorted(shards)
        else:
            fresh = self._new_client(sorted(shards))
            try:
                with anyio.fail_after(RESHARD_LOGIN_TIMEOUT):
                    await log_in(fresh, self.settings.token)
            except _RESHARD_FAILURES as exc:
                log.warning("discord: could not restart the client for shards %s: %s", shards, exc)
                await close_client(fresh)
                return now
            log.info("discord: restarting the client with shards %s", sorted(shards))
            self._client = fresh
            self._connecting = False
            await close_client(client)
            client = fresh
        self._shards = shards
        if shards and tg is not None:
            self._connecting = True
            tg.start_soon(stay_connected, client)
        return shards

    async def close(self) -> None:
        self._receiving = False
        if self._client is not None:
            with anyio.CancelScope(shield=True):
                await close_client(self._client)

    def is_ready(self) -> bool:
        """Connected, with the guilds loaded."""
        return self._client is not None and self._client.is_ready()

    @property
    def connected(self) -> bool:
        """What the bot's /readyz reads (a surface without it counts as connected). With shard
        leases a replica holding no shard is connected once logged in: it is healthy, and
        sends what the bot asks of it."""
        if self._leases is not None and not self._shards:
            return self._me() != 0 and self._client is not None and not self._client.is_closed()
        return self.is_ready()

    @property
    def shards(self) -> frozenset[int]:
        """The shards this replica connects (with shard leases; else empty)."""
        return self._shards

    # ---- inbound -------------------------------------------------------------------------------
    def file_from_ref(
        self, name: str, mime: str, size: int | None, kind: str, ref: str
    ) -> IncomingFile | None:
        """A file another replica received (its `IncomingFile.ref`), or None for a ref that is
        not one of ours."""
        return file_from_ref(name, mime, size, kind, ref, self._file_hosts)

    async def _on_message(self, message: discord.Message) -> None:
        me = self._me()
        if not self._receiving or not me:
            return
        if message.author.bot or message.webhook_id is not None:
            return  # our own messages, other bots, webhooks
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return  # joins, pins, thread-created notices
        user = UserRef(str(message.author.id), message.author.display_name)
        mentioned = mentions(message.content, me) or any(u.id == me for u in message.mentions)
        text = strip_mention(message.content, me)  # `!compact`: the bot parses `!` itself
        files = incoming_files(message, self._file_hosts)
        if not text and not files:
            return
        place = self._places.of_message(message, me, mentioned)
        if place is None:
            return
        key, opens_thread = place
        if message.guild is not None:
            self._guilds.remember(key.chat, message.guild.id)
        if opens_thread and user.id in self._known:
            if self._tg is not None:
                self._tg.start_soon(self._open_thread, message, user, text, files)
            return
        # A stranger's is dropped by the bot (which logs them once): no thread, no reply.
        self._enqueue(Inbound(key, user, text, str(message.id), files=files))

    async def _open_thread(
        self,
        message: discord.Message,
        user: UserRef,
        text: str,
        files: tuple[IncomingFile, ...] = (),
    ) -> None:
        try:
            await self._spending.new_message()
            thread = await message.create_thread(
                name=thread_name(text, f"Chat with {user.label}"),
                auto_archive_duration=THREAD_ARCHIVE_MINUTES,
            )
        except _THREAD_FAILURES as exc:
            log.warning(
                "could not open a thread in channel %s (%s); answering in the channel",
                message.channel.id,
                exc,
            )
            key = conversation_key(message.channel.id)
        except Exception:  # unmapped: logged with its traceback; the message is still answered
            log.exception("opening a thread in channel %s failed unexpectedly", message.channel.id)
            key = conversation_key(message.channel.id)
        else:
            self._places.opened_thread(thread.id, message.channel.id)
            key = conversation_key(thread.id)
        if message.guild is not None:
            self._guilds.remember(key.chat, message.guild.id)
        self._enqueue(Inbound(key, user, text, str(message.id), files=files))

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

    async def _on_command(self, interaction: discord.Interaction[Any], who: UserRef) -> None:
        key = self._places.of_interaction(interaction, self._me())
        if key is None:
            if who.id in self._known:  # strangers get silence; people we know get a reason
                await self._interactions.say_not_here(interaction)
            return
        data = cast(dict[str, Any], interaction.data or {})
        name = str(data.get("name", ""))
        options = [(str(o.get("name", "")), o.get("value")) for o in data.get("options", [])]
        text = command_text(name, options)
        if interaction.guild_id is not None:
            self._guilds.remember(key.chat, interaction.guild_id)
            agents = self._menus.command(interaction.guild_id, name)
            if agents is not None and data.get("guild_id") is not None:
                text = agents.text(command_argument(options))
        inbound = Inbound(key, who, text, str(interaction.id))
        if who.id not in self._known:
            self._enqueue(inbound)  # the bot drops it; not even "thinking…" for strangers
            return
        followup = Followup(interaction, key, ephemeral=is_ephemeral(name))
        pending = self._enqueue(inbound, followup)  # its place in the lane, before the ack
        try:
            await self._interactions.defer_command(followup, name)
        finally:
            pending.ready.set()

    async def _on_press(self, interaction: discord.Interaction[Any], who: UserRef) -> None:
        data = cast(dict[str, Any], interaction.data or {})
        token = str(data.get("custom_id", ""))
        message = interaction.message
        opened = self._choices.get(message.id) if message is not None else None
        if opened is not None:
            key: ConversationKey | None = opened.key
        else:
            key = self._places.of_interaction(interaction, self._me())
        if key is None or not token:
            return
        event_id = str(interaction.id)
        if who.id not in self._known:
            await self._hand_over(ChoiceAnswer(key, who, token, event_id))  # dropped, silently
            return
        theirs = opened is None or who.id in opened.allowed

        async def answer(notify: Notify) -> None:
            await self._hand_over(ChoiceAnswer(key, who, token, event_id, notify))

        await self._interactions.take_press(interaction, answer, theirs=theirs)

    def _enqueue(self, event: Inbound, followup: Followup | None = None) -> _Pending:
        """File `event` in its conversation's lane (dropped when not running); a followup's
        event waits there until the command is acknowledged."""
        pending = _Pending(event, followup)
        self._spending.heard(int(event.key.chat))  # what the bot says next starts a reply
        if followup is None:
            pending.ready.set()
        self._lanes.put(event.key, pending)
        return pending

    async def _deliver(self, pending: _Pending) -> None:
        await pending.ready.wait()
        with answering(pending.followup):
            if self._on_event is not None:
                await self._on_event(pending.event)

    async def _hand_over(self, event: ChoiceAnswer) -> None:
        if self._on_event is None:
            return
        try:
            await self._on_event(event)
        except Exception:
            log.exception("the bot failed on a Discord event in %s", event.key)

    # ---- outbound ------------------------------------------------------------------------------
    async def send(
        self,
        key: ConversationKey,
        text: str,
        *,
        formatted: bool = False,
        buttons: Sequence[Choice] = (),
    ) -> MessageRef:
        content = self._content(text, formatted)
        view = button_row(buttons) if buttons else None
        followup = current_followup(key)
        if followup is not None:
            ref = await self._interactions.send(followup, content, view)
            if ref is not None:
                return ref
        channel = self._messageable(key)
        await self._spending.new_message(channel.id, final=formatted)
        message = await REST.call(
            channel.send(content, view=view or discord.utils.MISSING, allowed_mentions=NO_MENTIONS)
        )
        self._spending.sent(channel.id, message.id, _shown_as(content, buttons), final=formatted)
        return MessageRef(key, str(message.id))

    async def edit(
        self,
        ref: MessageRef,
        text: str,
        *,
        formatted: bool = False,
        buttons: Sequence[Choice] = (),
    ) -> None:
        """The message's text and its buttons; with none, its components go (`view=None`)."""
        content = self._content(text, formatted)
        view = button_row(buttons) if buttons else None
        message_id = int(ref.id)
        shown = _shown_as(content, buttons)  # the same text with other buttons is a change
        if await self._interactions.edit(message_id, content, view):
            return
        message = self._messageable(ref.key).get_partial_message(message_id)
        # Live edits (not `formatted`) may be declined with a RateLimited while the budget is busy.
        if await self._spending.edit(message_id, shown, final=formatted):
            await EDITS.call(message.edit(content=content, view=view, allowed_mentions=NO_MENTIONS))
            self._spending.edited(int(ref.key.chat), message_id, shown, final=formatted)

    async def send_file(self, key: ConversationKey, file: OutgoingFile) -> MessageRef:
        """The file as an attachment in the conversation's channel, its caption as the text;
        FileRefused past the place's upload limit (or when Discord says it is too large)."""
        limit = self._upload_limit(key)
        if len(file.data) > limit:
            raise FileRefused(too_large(file.name, limit), limit=limit)
        channel = self._messageable(key)
        caption = plain(ellipsize(" ".join(file.caption.split()), CAPTION_CHARS))
        await self._spending.new_message()  # a file is part of the final answer
        message = await FILES.call(
            channel.send(caption or None, file=upload(file), allowed_mentions=NO_MENTIONS)
        )
        return MessageRef(key, str(message.id))

    def open_live(self, key: ConversationKey) -> LiveReply:
        return EditedLive(self, key)

    async def typing(self, key: ConversationKey) -> None:
        if current_followup(key) is not None:
            return  # the deferred answer already shows "thinking…"
        channel = self._messageable(key)
        if not self._spending.take_if_free():
            return  # busy: the text itself is on its way
        await REST.call(channel.typing())

    # ---- choices -------------------------------------------------------------------------------
    async def ask_choice(
        self,
        key: ConversationKey,
        prompt: str,
        choices: Sequence[Choice],
        *,
        allowed_users: Sequence[str],
    ) -> MessageRef:
        content = fit(plain(prompt))
        view = button_row(choices)
        channel = self._messageable(key)
        await self._spending.new_message()
        message = await REST.call(channel.send(content, view=view, allowed_mentions=NO_MENTIONS))
        self._choices[message.id] = _OpenChoice(key, frozenset(allowed_users))
        return MessageRef(key, str(message.id))

    async def close_choice(self, ref: MessageRef, prompt: str, outcome: str) -> None:
        self._choices.pop(int(ref.id), None)  # no more presses to check
        content = closed_choice_text(fit(plain(prompt)), outcome)
        message = self._messageable(ref.key).get_partial_message(int(ref.id))
        await self._spending.new_message()  # an approval's outcome: as urgent as a message
        await EDITS.call(message.edit(content=content, view=None, allowed_mentions=NO_MENTIONS))

    # ---- agent commands ------------------------------------------------------------------------
    async def agent_command_menu(
        self, key: ConversationKey, commands: Sequence[MenuCommand]
    ) -> None:
        """The agent's commands as the guild's application commands (`agent_menus.py`); a DM
        gets none (global commands are every conversation's)."""
        guild = self._guild_of(key)
        if guild is None:
            log.debug("no native menu for the agent's commands in %s (not in a guild)", key)
            return
        self._menus.want(guild, key, commands)

    def _our_names(self) -> list[str]:
        return [name.lower() for name, _ in self._commands]

    async def _spend_slot(self) -> None:
        await self._spending.new_message()

    # ---- helpers -------------------------------------------------------------------------------
    def _guild_of(self, key: ConversationKey) -> int | None:
        """The guild a conversation lives in (None: a DM, or a channel the bot cannot see)."""
        known = self._guilds.get(key.chat)
        if known is not None:
            return known
        client = self._client
        channel = client.get_channel(int(key.chat)) if client is not None else None
        guild = getattr(channel, "guild", None)
        return guild.id if isinstance(guild, discord.Guild) else None

    def _upload_limit(self, key: ConversationKey) -> int:
        """Discord's limit for bots, or the guild's when boosts raised it."""
        guild_id = self._guild_of(key)
        client = self._client
        guild = client.get_guild(guild_id) if client is not None and guild_id else None
        return max(UPLOAD_LIMIT, guild.filesize_limit) if guild is not None else UPLOAD_LIMIT

    def _me(self) -> int:
        """The bot's user id (0 before the log-in)."""
        client = self._client
        return client.user.id if client is not None and client.user is not None else 0

    def _messageable(self, key: ConversationKey) -> discord.PartialMessageable:
        client = self._client
        if client is None or client.is_closed():
            raise SendFailed("the Discord client is not running", transient=False)
        return client.get_partial_messageable(int(key.chat))

    @staticmethod
    def _content(text: str, formatted: bool) -> str:
        return fit(text if formatted else plain(text))


def _shown_as(content: str, buttons: Sequence[Choice]) -> str:
    """What a message shows, for the budget's "changes nothing" check: its text and buttons."""
    return content + "".join(f"\x00{choice.token}" for choice in buttons)
