"""The agent's own commands as Discord application commands, scoped to each guild.

Where: a conversation in a guild (a thread or a channel) puts its agent's commands into that
guild's command set, beside Switchboard's own global commands (which every guild already shows,
so they are not repeated there). A guild's set is the union of what the agents of its
conversations advertise, in the order first heard, at most `MAX_COMMANDS`. DMs get nothing: the
only commands a DM shows are global ones, shared by every conversation the bot has, so one
conversation's agent must not rewrite them; in a DM the agent's commands are typed (`!!name`,
listed by `/help`).

Names follow Discord's rules: lowercase, 1-32 characters of `a-z 0-9 - _` (anything else
becomes `-`); a name that is one of ours is shown as `agent-<name>` and, used, reaches the
bot doubled (`//status`), which the bot hands to the agent. An agent command with an input hint
takes one optional string option, `input`, described by the hint.

When: only when a guild's set changed from what this process last published there, and
coalesced (`publish` waits `coalesce` seconds after a change, so a burst of updates from several
conversations is one call): Discord allows about 200 command creates a day per guild. A failed
publish is logged and tried again at the next change; it never ends the surface."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, cast

import anyio

from surfaces.base import ConversationKey, MenuCommand
from surfaces.discord.errors import SDK_FAILURES
from surfaces.discord.sdk import discord
from surfaces.text import ellipsize

__all__ = ["AgentCommand", "AgentMenus", "agent_commands", "discord_name"]

log = logging.getLogger(__name__)

NAME_CHARS = 32
DESCRIPTION_CHARS = 100
MAX_COMMANDS = 100  # Discord's cap of chat-input commands per scope
CLASH_PREFIX = "agent-"
INPUT_OPTION = "input"
STRING = 3  # the option type of free text
_RE_NOT_ALLOWED = re.compile(r"[^a-z0-9_-]+")


@dataclass(frozen=True, slots=True)
class AgentCommand:
    """One agent command as Discord shows it."""

    agent_name: str  # as the agent spells it
    clashes: bool  # named like one of ours: reaches the bot doubled
    payload: dict[str, Any]

    def text(self, argument: str) -> str:
        """What the bot is handed when a person uses it."""
        slashes = "//" if self.clashes else "/"
        return f"{slashes}{self.agent_name} {argument}".rstrip()


def discord_name(name: str) -> str:
    """A command name as Discord accepts it ("" when nothing of it is left)."""
    slug = _RE_NOT_ALLOWED.sub("-", name.strip().lower()).strip("-")
    return slug[:NAME_CHARS].rstrip("-")


def agent_commands(
    commands: Sequence[MenuCommand], ours: Collection[str]
) -> dict[str, AgentCommand]:
    """The agent's commands by their Discord name, in order, clashes with `ours` renamed, names
    that map to one already taken (or to nothing) left out."""
    taken = set(ours)
    mapped: dict[str, AgentCommand] = {}
    for command in commands:
        name = discord_name(command.name)
        clashes = name in taken
        if clashes:
            name = discord_name(CLASH_PREFIX + name)
        if not name or name in taken or name in mapped:
            log.debug("agent command %r has no free Discord name; left out", command.name)
            continue
        summary = " ".join(command.description.split()) or f"the agent's /{command.name}"
        payload: dict[str, Any] = {
            "type": 1,
            "name": name,
            "description": ellipsize(summary, DESCRIPTION_CHARS),
        }
        hint = " ".join(command.hint.split())
        if hint:
            payload["options"] = [
                {
                    "type": STRING,
                    "name": INPUT_OPTION,
                    "description": ellipsize(hint, DESCRIPTION_CHARS),
                    "required": False,
                }
            ]
        mapped[name] = AgentCommand(command.name, clashes, payload)
    return mapped


class AgentMenus:
    """What each guild should show and what it shows; publishes the difference."""

    def __init__(self, *, coalesce: float) -> None:
        self._coalesce = coalesce
        self._wanted: dict[int, dict[ConversationKey, tuple[MenuCommand, ...]]] = {}
        self._shown: dict[int, dict[str, AgentCommand]] = {}  # published, per guild
        self._dirty: set[int] = set()
        self._changed = anyio.Event()

    def want(self, guild: int, key: ConversationKey, commands: Sequence[MenuCommand]) -> None:
        """The agent of conversation `key` (in `guild`) advertises `commands`."""
        conversations = self._wanted.setdefault(guild, {})
        if conversations.get(key) == tuple(commands):
            return
        conversations[key] = tuple(commands)
        self._dirty.add(guild)
        self._changed.set()

    def command(self, guild: int, name: str) -> AgentCommand | None:
        """The agent command `name` is in `guild`, if it is one."""
        return self._shown.get(guild, {}).get(name)

    async def publish(
        self,
        client_of: Callable[[], discord.Client | None],
        ours: Callable[[], Collection[str]],
        spend: Callable[[], Awaitable[None]],
    ) -> None:
        """Publish each changed guild's set, until cancelled, through the client `client_of`
        gives then (with shard leases the client may be replaced); `ours` names our commands,
        and `spend` waits for a slot of the global budget before each call."""
        while True:
            await self._changed.wait()
            await anyio.sleep(self._coalesce)  # later updates of the burst join this call
            self._changed = anyio.Event()
            dirty, self._dirty = self._dirty, set()
            for guild in sorted(dirty):
                client = client_of()
                if client is None:
                    return
                await self._publish_guild(client, guild, ours(), spend)

    async def _publish_guild(
        self,
        client: discord.Client,
        guild: int,
        ours: Collection[str],
        spend: Callable[[], Awaitable[None]],
    ) -> None:
        union: list[MenuCommand] = []
        for commands in self._wanted.get(guild, {}).values():
            union.extend(commands)
        wanted = dict(list(agent_commands(union, ours).items())[:MAX_COMMANDS])
        shown = self._shown.get(guild)
        if shown is not None and _payloads(shown) == _payloads(wanted):
            return  # unchanged: Discord counts every create against a daily budget
        application = client.application_id
        if application is None:
            return
        await spend()
        try:
            await client.http.bulk_upsert_guild_commands(
                application, guild, cast(Any, _payloads(wanted))
            )
        except SDK_FAILURES as exc:
            log.warning("could not show the agent's commands in guild %s: %s", guild, exc)
            self._shown.pop(guild, None)  # unknown now: the next change publishes again
            return
        self._shown[guild] = wanted


def _payloads(commands: dict[str, AgentCommand]) -> list[dict[str, Any]]:
    return [command.payload for command in commands.values()]
