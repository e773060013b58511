"""The agent's commands in each chat's own command menu (`setMyCommands` with a chat scope).

A chat's menu replaces the bot-wide one there, so it holds ours and then the agent's, mapped to
Telegram's rules (`convert.agent_menu`). What people type back is read through the same map
(`targets`), from the moment the list is known, before Telegram has the menu.

Menus change rarely but may be asked for in bursts (every agent session reports its commands):
a chat's menu is sent only when it differs from the last one asked for, by one task per chat
that sends the newest list and goes on while a newer one arrived meanwhile. `setMyCommands` is
limited per bot, so the chats' calls go one at a time and a 429 is waited out by all of them;
any other refusal is logged and the chat keeps its previous menu."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

import anyio
import anyio.abc
import stamina
from telegram import Bot, BotCommand, BotCommandScopeChat

from surfaces.base import MenuCommand
from surfaces.errors import RateLimited, SurfaceError
from surfaces.telegram.convert import AgentMenu, agent_menu
from surfaces.telegram.errors import BOT_API

__all__ = ["AgentMenus"]

log = logging.getLogger(__name__)

MAX_RATE_WAITS = 5  # 429s waited out for one menu before giving up on it


class AgentMenus:
    """Per chat: the menu asked for, the names people type back, and the task that sends it."""

    def __init__(self, bot: Callable[[], Awaitable[Bot]]) -> None:
        self._bot = bot
        self._tg: anyio.abc.TaskGroup | None = None
        self._wanted: dict[int, AgentMenu] = {}
        self._sent: dict[int, tuple[tuple[str, str], ...]] = {}
        self._syncing: set[int] = set()
        # setMyCommands is limited per bot, not per chat: one call at a time, and a 429 holds
        # every chat's menu back until it is waited out.
        self._one_at_a_time = anyio.Lock()

    def open(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg

    def close(self) -> None:
        self._tg = None

    def targets(self, chat: str) -> Mapping[str, str]:
        """This chat's menu names of the agent's commands -> the text the bot expects."""
        try:
            menu = self._wanted.get(int(chat))
        except ValueError:
            return {}
        return menu.targets if menu is not None else {}

    async def update(
        self, chat: int, ours: Sequence[tuple[str, str]], commands: Sequence[MenuCommand]
    ) -> None:
        menu = agent_menu(ours, commands)
        previous = self._wanted.get(chat)
        if previous is not None and previous.entries == menu.entries:
            return
        self._wanted[chat] = menu
        if chat in self._syncing:
            return  # the running task sends the newest list when its call is done
        self._syncing.add(chat)
        if self._tg is None:  # not receiving yet (or any more): send it now
            await self._sync(chat)
        else:
            self._tg.start_soon(self._sync, chat)

    async def _sync(self, chat: int) -> None:
        try:
            while (menu := self._wanted.get(chat)) is not None and self._sent.get(
                chat
            ) != menu.entries:
                async with self._one_at_a_time:
                    try:
                        await self._send_waiting_out_429s(chat, menu)
                    except RateLimited:
                        log.warning("telegram: gave up on the command menu of chat %s", chat)
                        return
                    except SurfaceError as exc:
                        log.warning("telegram: no command menu for chat %s: %s", chat, exc)
                        return
                self._sent[chat] = menu.entries
        finally:
            self._syncing.discard(chat)

    async def _send_waiting_out_429s(self, chat: int, menu: AgentMenu) -> None:
        """Called holding the lock, so a 429's wait holds every chat's menu back."""
        async for trying in stamina.retry_context(
            on=_rate_limit_wait, attempts=MAX_RATE_WAITS + 1, timeout=None
        ):
            with trying:
                await self._send(chat, menu)

    async def _send(self, chat: int, menu: AgentMenu) -> None:
        bot = await self._bot()
        await BOT_API.call(
            bot.set_my_commands(
                [BotCommand(name, description) for name, description in menu.entries],
                scope=BotCommandScopeChat(chat),
            )
        )


def _rate_limit_wait(exc: Exception) -> float | bool:
    """A 429 is waited out for as long as Telegram says; nothing else is retried here."""
    return exc.retry_after if isinstance(exc, RateLimited) else False
