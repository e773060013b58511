"""Where Discord conversations live, and which places the bot serves.

A DM is one conversation (its channel id). In a guild, a message that mentions the bot in an
allowed channel opens a thread on that message, and the thread is the conversation:
`ConversationKey("discord", <thread id>)`. A thread is a channel of its own on Discord, with its
own rate-limit buckets, so it is the chat (the bot paces per chat), not a (channel, thread)
pair; sending needs only its id. Later messages in a thread the bot opened go on without a
mention; in other threads only a mention is taken. `allowed_guilds` and `allowed_channels`
(empty: all) say where the bot serves; a thread is served where its parent channel is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from config.settings import DiscordSettings
from surfaces.base import ConversationKey
from surfaces.discord.sdk import discord

__all__ = ["NAME", "Places", "conversation_key"]

NAME = "discord"


def conversation_key(channel_id: int) -> ConversationKey:
    """The conversation of a DM channel or a thread (or a channel the bot answers in)."""
    return ConversationKey(NAME, str(channel_id))


@dataclass(frozen=True, slots=True)
class _Channel:
    """A channel known only by id (not in discord.py's cache)."""

    id: int


class Places:
    """The guilds and channels the bot serves and the threads it opened."""

    def __init__(self, settings: DiscordSettings) -> None:
        self._guilds = frozenset(settings.allowed_guilds)
        self._channels = frozenset(settings.allowed_channels)
        self._threads: dict[int, int] = {}  # threads we opened -> their parent channel

    def opened_thread(self, thread_id: int, parent_id: int) -> None:
        self._threads[thread_id] = parent_id

    def of_message(
        self, message: discord.Message, me: int, mentioned: bool
    ) -> tuple[ConversationKey, bool] | None:
        """(the conversation, whether the message starts one in a channel, which opens a
        thread), or None when the message is not for the bot."""
        channel = message.channel
        guild = message.guild
        guild_id = guild.id if guild is not None else getattr(channel, "guild_id", None)
        if guild_id is None:  # a DM
            return conversation_key(channel.id), False
        if not self._serves_guild(guild_id):
            return None
        parent = self._thread_parent(channel, me)
        if parent is not None:  # a thread: ours continue without a mention
            ours, parent_id = parent
            if (ours or mentioned) and self._serves_channel(parent_id):
                return conversation_key(channel.id), False
            return None
        if not mentioned or not self._serves_channel(channel.id):
            return None
        return conversation_key(channel.id), True

    def of_interaction(
        self, interaction: discord.Interaction[Any], me: int
    ) -> ConversationKey | None:
        """The conversation an interaction belongs to, or None where the bot does not serve."""
        channel_id = interaction.channel_id
        if channel_id is None:
            return None
        if interaction.guild_id is None:
            return conversation_key(channel_id)
        if not self._serves_guild(interaction.guild_id):
            return None
        parent = self._thread_parent(interaction.channel or _Channel(channel_id), me)
        place = parent[1] if parent is not None else channel_id
        return conversation_key(channel_id) if self._serves_channel(place) else None

    def _thread_parent(self, channel: Any, me: int) -> tuple[bool, int] | None:
        """(opened by us, parent channel id) if `channel` is a thread, else None."""
        if channel.id in self._threads:
            return True, self._threads[channel.id]
        if isinstance(channel, discord.Thread):
            return channel.owner_id == me, channel.parent_id
        return None

    def _serves_guild(self, guild_id: int) -> bool:
        return not self._guilds or str(guild_id) in self._guilds

    def _serves_channel(self, channel_id: int) -> bool:
        return not self._channels or str(channel_id) in self._channels
