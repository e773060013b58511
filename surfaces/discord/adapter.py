"""The Discord surface on discord.py. With `gateway.py` (the client and its start-up),
`connection.py` (the client and its shards), `inbound.py` (messages, slash commands and presses
in), `interactions.py` (slash commands answered by followups, buttons), `messages.py` (the bot's
messages out), `live.py` (a reply shown while it is written), `places.py` (where conversations
live) and `errors.py`, the only code that imports `discord`.

Conversations: a DM is one; in a guild, a mention in a channel the bot serves opens a thread, and
the thread is one (`places.py`).

Typed answers (`ask_text`, the `AsksForText` ability): the prompt mentions the person in a
guild, and their next message in that conversation is taken without a mention
(`surfaces.awaited_replies`): in a channel the bot answers in (a thread could not be opened) or
in someone else's thread it would otherwise be dropped, or would open a new thread.

Approvals: buttons whose presses come to `on_interaction` and go to the bot as a `ChoiceAnswer`
(`interactions.py`); the bot's outcome edits the message, removing the buttons. A message's own
buttons (the live reply's Stop) are the same kind of component row, pressed the same way; an
edit without buttons removes them.

Files: a message's attachments reach the bot as `IncomingFile`s, and the bot's files go out as
attachments within the place's upload limit (`files.py`). The agent's own commands become guild
application commands (`agent_menus.py`).

Rate limits: a live reply's calls pass the chat's pacer (`min_edit_interval`: Discord's
per-channel budget is about a call a second); discord.py follows each bucket's `X-RateLimit-*`
headers; `spending.py` keeps
all calls under Discord's global limit, the answers first, so with many conversations streaming
their live edits thin out instead of drawing 429s. Errors are translated by `errors.py`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.abc

from config.settings import DiscordSettings
from surfaces.awaited_replies import AwaitedReplies
from surfaces.base import (
    Choice,
    ClusterLeases,
    ConversationKey,
    IncomingFile,
    LiveReply,
    MenuCommand,
    MessageRef,
    OnEvent,
    OutgoingFile,
    SurfaceCapabilities,
    UserRef,
)
from surfaces.discord.agent_menus import AgentMenus
from surfaces.discord.connection import Connection
from surfaces.discord.convert import (
    MAX_CHARS,
    closed_choice_text,
    fit,
    plain,
    render,
)
from surfaces.discord.errors import EDITS, FILES, REST
from surfaces.discord.files import (
    UPLOAD_LIMIT,
    file_from_ref,
    too_large,
    upload,
)
from surfaces.discord.gateway import (
    NO_MENTIONS,
    sync_commands,
    tame_reconnect_logs,
)
from surfaces.discord.inbound import Inbox, OpenChoice
from surfaces.discord.interactions import (
    Interactions,
    current_followup,
)
from surfaces.discord.interactions import buttons as button_row
from surfaces.discord.live import DiscordLive
from surfaces.discord.messages import Messages
from surfaces.discord.places import NAME
from surfaces.discord.sdk import discord
from surfaces.discord.spending import Spending
from surfaces.errors import FileRefused
from surfaces.pacing import Pacing
from surfaces.text import ellipsize

log = logging.getLogger(__name__)

COMMAND_SYNC_TIMEOUT = 10.0
MENU_COALESCE = 2.0  # seconds an agent command update waits for the rest of its burst
CAPTION_CHARS = 500  # a file's caption: a line, not a message
GLOBAL_RATE = 45.0  # requests a second for the whole bot; Discord's limit is 50
ANSWER_WAIT = 300.0  # a typed answer awaited (the bot's approval timeout: `create_surface`)


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
        answer_wait: float = ANSWER_WAIT,
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
            pacing=Pacing(min_edit_interval, from_start=True),
        )
        self._spending = Spending(global_rate)  # the whole bot's requests a second
        self._interactions = Interactions(settings.api_url.rstrip("/"))
        self._menus = AgentMenus(coalesce=menu_coalesce)
        self._inbox = Inbox(
            settings,
            me=self._me,
            spending=self._spending,
            interactions=self._interactions,
            menus=self._menus,
            awaited=AwaitedReplies(answer_wait),
        )
        self._connection = Connection(
            settings,
            guild_ready_timeout=guild_ready_timeout,
            handlers={
                "on_message": self._inbox.on_message,
                "on_interaction": self._inbox.on_interaction,
            },
        )
        self._messages = Messages(self._spending, self._interactions, self._messageable)
        self._tg: anyio.abc.TaskGroup | None = None
        self._commands: list[tuple[str, str]] = []

    def render(self, markdown: str) -> str:
        return render(markdown)

    def command_menu(self, commands: Sequence[tuple[str, str]]) -> Any:
        """Remembered, and synced as slash commands (now, if connected, else at start-up)."""
        self._commands = list(commands)
        client = self._connection.client
        if self._tg is not None and client is not None:
            self._tg.start_soon(sync_commands, client, self._commands)
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
        tame_reconnect_logs()
        try:
            client = await self._connection.log_in()
            async with anyio.create_task_group() as tg:
                self._tg = tg
                self._inbox.open(tg, on_event)
                self._connection.connect(tg)
                with anyio.move_on_after(COMMAND_SYNC_TIMEOUT):
                    await sync_commands(client, self._commands)
                tg.start_soon(self._menus.publish, self._current, self._our_names, self._spend_slot)
                task_status.started()
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException:
            await self._connection.close()
            raise
        finally:
            self._inbox.close()
            self._tg = None
            self._connection.stopped()

    def _current(self) -> discord.Client | None:
        return self._connection.client

    def set_leases(self, leases: ClusterLeases) -> None:
        """Several replicas share this bot: each connects only the shards whose lease it holds
        (`shards.py`); shard_count 0 counts as one shard."""
        self._connection.leases = leases

    async def close(self) -> None:
        self._inbox.stop()
        await self._connection.close()

    def is_ready(self) -> bool:
        """Connected, with the guilds loaded."""
        return self._connection.is_ready()

    @property
    def connected(self) -> bool:
        """What the bot's /readyz reads (a surface without it counts as connected)."""
        return self._connection.connected

    @property
    def shards(self) -> frozenset[int]:
        """The shards this replica connects (with shard leases; else empty)."""
        return self._connection.shards

    # ---- inbound -------------------------------------------------------------------------------
    def file_from_ref(
        self, name: str, mime: str, size: int | None, kind: str, ref: str
    ) -> IncomingFile | None:
        """A file another replica received (its `IncomingFile.ref`), or None for a ref that is
        not one of ours."""
        return file_from_ref(name, mime, size, kind, ref, self._inbox.file_hosts)

    # ---- outbound ------------------------------------------------------------------------------
    async def send(
        self,
        key: ConversationKey,
        text: str,
        *,
        formatted: bool = False,
        buttons: Sequence[Choice] = (),
    ) -> MessageRef:
        return await self._messages.send(key, text, final=formatted, buttons=buttons)

    async def edit(
        self,
        ref: MessageRef,
        text: str,
        *,
        formatted: bool = False,
        buttons: Sequence[Choice] = (),
    ) -> None:
        """The message's text and its buttons; with none, its components go (`view=None`)."""
        await self._messages.edit(ref, text, final=formatted, buttons=buttons)

    def open_live(self, key: ConversationKey) -> LiveReply:
        """A reply shown by budgeted edits (`live.py`)."""
        return DiscordLive(self, key, self._messages)

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
        message = await REST.call(
            channel.send(content, view=view or discord.utils.MISSING, allowed_mentions=NO_MENTIONS)
        )
        self._inbox.choices[message.id] = OpenChoice(key, frozenset(allowed_users))
        return MessageRef(key, str(message.id))

    async def ask_text(self, key: ConversationKey, prompt: str, *, user: UserRef) -> MessageRef:
        """The prompt, mentioning `user` in a guild (their mention alone is allowed), and their
        next message here awaited, mention or not (see the module's doc)."""
        content = fit(plain(prompt))
        mentions = NO_MENTIONS
        if key.chat in self._inbox.guilds and user.id.isdigit():
            content = fit(f"<@{user.id}> {content}")
            mentions = discord.AllowedMentions(users=[discord.Object(int(user.id))])
        self._inbox.awaited.expect(key, user.id)  # before: an answer may beat the post's reply
        channel = self._messageable(key)
        await self._spending.new_message()
        message = await REST.call(channel.send(content, allowed_mentions=mentions))
        return MessageRef(key, str(message.id))

    def withdraw_text_ask(self, key: ConversationKey, *, user: UserRef) -> None:
        self._inbox.awaited.take(key, user.id)

    async def close_choice(self, ref: MessageRef, prompt: str, outcome: str) -> None:
        self._inbox.choices.pop(int(ref.id), None)  # no more presses to check
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
        known = self._inbox.guilds.get(key.chat)
        if known is not None:
            return known
        client = self._connection.client
        channel = client.get_channel(int(key.chat)) if client is not None else None
        guild = getattr(channel, "guild", None)
        return guild.id if isinstance(guild, discord.Guild) else None

    def _upload_limit(self, key: ConversationKey) -> int:
        """Discord's limit for bots, or the guild's when boosts raised it."""
        guild_id = self._guild_of(key)
        client = self._connection.client
        guild = client.get_guild(guild_id) if client is not None and guild_id else None
        return max(UPLOAD_LIMIT, guild.filesize_limit) if guild is not None else UPLOAD_LIMIT

    def _me(self) -> int:
        """The bot's user id (0 before the log-in)."""
        client = self._connection.client
        return client.user.id if client is not None and client.user is not None else 0

    def _messageable(self, key: ConversationKey) -> discord.PartialMessageable:
        return self._connection.channel(key)
