"""What people send the Discord bot: messages (a mention in a served channel opens a thread,
`places.py`), slash commands (deferred at once, answered by followups) and button presses
(`interactions.py`), turned into the bot's `Inbound` / `ChoiceAnswer`. People not on the
allowlists get no thread (the bot drops their message, logging them once) and no interaction
answer: strangers get silence. A message the bot awaits (`awaited`: a typed answer the surface
asked this person for in this conversation, `surfaces.awaited_replies`) is taken there as it
is, though it mentions nobody or would open a thread.

Order: events of one conversation are handed to the bot one at a time, in arrival order, each
conversation in its own lane (`surfaces.lanes`); a slash command waits in its lane until it is
acknowledged. Button presses skip the lanes: they must be answered at once."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import anyio
import anyio.abc
import yarl

from config.settings import DiscordSettings
from surfaces.awaited_replies import AwaitedReplies
from surfaces.base import ChoiceAnswer, ConversationKey, Inbound, IncomingFile, OnEvent, UserRef
from surfaces.bounded import BoundedMap
from surfaces.discord.agent_menus import AgentMenus
from surfaces.discord.convert import (
    command_argument,
    command_text,
    is_ephemeral,
    mentions,
    strip_mention,
    thread_name,
)
from surfaces.discord.errors import SDK_FAILURES
from surfaces.discord.files import CDN_HOSTS, incoming_files
from surfaces.discord.interactions import Followup, Interactions, Notify, answering
from surfaces.discord.places import Places, conversation_key
from surfaces.discord.sdk import discord
from surfaces.discord.spending import Spending
from surfaces.lanes import Lanes

__all__ = ["Inbox", "OpenChoice"]

log = logging.getLogger(__name__)

THREAD_ARCHIVE_MINUTES: Literal[1440] = 1440  # a day without messages
GUILDS_REMEMBERED = 10_000  # conversations whose guild is known without a cache lookup
# Why a thread may not open (ValueError: a name discord.py refuses); the channel answers instead.
_THREAD_FAILURES: tuple[type[Exception], ...] = (*SDK_FAILURES, ValueError)


@dataclass(eq=False)
class _Pending:
    """One event waiting in its conversation's lane; `ready` once it may be handed over (a
    slash command: once acknowledged), answering `followup` if it has one."""

    event: Inbound
    followup: Followup | None = None
    ready: anyio.Event = field(default_factory=anyio.Event)


@dataclass(frozen=True, slots=True)
class OpenChoice:
    """An approval on show: where, and who may press its buttons."""

    key: ConversationKey
    allowed: frozenset[str]


class Inbox:
    """Receives while open (the surface runs); `me()` is the bot's user id (0 before log-in)."""

    def __init__(
        self,
        settings: DiscordSettings,
        *,
        me: Callable[[], int],
        spending: Spending,
        interactions: Interactions,
        menus: AgentMenus,
        awaited: AwaitedReplies,
    ) -> None:
        self._me = me
        self.awaited = awaited
        self._spending = spending
        self._interactions = interactions
        self._menus = menus
        # Everyone the bot may answer: used only to give strangers nothing (no thread, no ack);
        # the bot's access policy decides everything else.
        self._known = frozenset([*settings.allowed_users, *settings.approvers, *settings.admins])
        self._places = Places(settings)
        self._lanes: Lanes[ConversationKey, _Pending] = Lanes(
            self._deliver, failure="the bot failed on a Discord event in %s", logger=log
        )
        self.choices: dict[int, OpenChoice] = {}  # approval message id ->
        self.guilds: BoundedMap[str, int] = BoundedMap(GUILDS_REMEMBERED)  # chat -> its guild
        # Where attachments may be downloaded from: Discord's CDN (and the API host in tests).
        api_host = yarl.URL(settings.api_url).host if settings.api_url else None
        self.file_hosts = CDN_HOSTS | ({api_host} if api_host else set())
        self._on_event: OnEvent | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._receiving = False

    def open(self, tg: anyio.abc.TaskGroup, on_event: OnEvent) -> None:
        self._tg, self._on_event = tg, on_event
        self._lanes.open(tg)
        self._receiving = True

    def stop(self) -> None:
        """Nothing more is received (the surface is closing)."""
        self._receiving = False

    def close(self) -> None:
        self._receiving = False
        self._lanes.close()
        self._tg = None

    async def on_message(self, message: discord.Message) -> None:
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
        files = incoming_files(message, self.file_hosts)
        if not text and not files:
            return
        here = conversation_key(message.channel.id)
        if self.awaited.take(here, user.id):
            place: tuple[ConversationKey, bool] | None = (here, False)
        else:
            place = self._places.of_message(message, me, mentioned)
        if place is None:
            return
        key, opens_thread = place
        if message.guild is not None:
            self.guilds.remember(key.chat, message.guild.id)
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
            self.guilds.remember(key.chat, message.guild.id)
        self._enqueue(Inbound(key, user, text, str(message.id), files=files))

    async def on_interaction(self, interaction: discord.Interaction[Any]) -> None:
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
            self.guilds.remember(key.chat, interaction.guild_id)
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
        opened = self.choices.get(message.id) if message is not None else None
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
