"""App Home: what the bot knows to show a person who opens its Home tab. The conversations each
allowed person had with the bot are kept here (bounded per person and in people), with the bot's
commands and the agent's last listed ones; a stranger's Home says they have no access."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from surfaces.base import ConversationKey, MenuCommand
from surfaces.bounded import BoundedMap
from surfaces.errors import SurfaceError
from surfaces.slack.convert import (
    HOME_RECENT,
    HOME_WORDS,
    RecentConversation,
    home_view,
    stranger_home_view,
)
from surfaces.slack.web_api import WebApi

__all__ = ["Home"]

log = logging.getLogger(__name__)

PEOPLE = 1_000  # people whose recent conversations are kept (least recently active dropped)
MENUS = 10_000  # conversations whose agent commands are kept


class Home:
    def __init__(self, allowed: set[str]) -> None:
        self._allowed = allowed
        self._ours: list[tuple[str, str]] = []
        self._recent: BoundedMap[str, BoundedMap[ConversationKey, RecentConversation]] = BoundedMap(
            PEOPLE
        )
        self._agent_menus: BoundedMap[ConversationKey, tuple[MenuCommand, ...]] = BoundedMap(MENUS)
        self._latest_agent_menu: tuple[MenuCommand, ...] = ()

    def may_chat(self, user: str) -> bool:
        return user in self._allowed

    def set_ours(self, commands: Sequence[tuple[str, str]]) -> None:
        self._ours = list(commands)

    def set_agent_menu(self, key: ConversationKey, commands: Sequence[MenuCommand]) -> None:
        self._agent_menus.remember(key, tuple(commands))
        self._latest_agent_menu = tuple(commands)

    def agent_names(self, key: ConversationKey) -> tuple[str, ...]:
        """The agent's command names in this conversation, that are not also ours."""
        ours = {name for name, _ in self._ours}
        return tuple(c.name for c in self._agent_menus.get(key, ()) if c.name not in ours)

    def saw(self, user: str, key: ConversationKey, text: str) -> None:
        """`user` (allowed to chat) wrote `text` in `key`'s conversation."""
        if not self.may_chat(user):
            return
        mine = self._recent.get(user)
        if mine is None:
            mine = BoundedMap(HOME_RECENT)
        self._recent.remember(user, mine)
        words = " ".join(text[: HOME_WORDS * 4].split())[: HOME_WORDS + 1]  # bounded when kept
        mine.remember(key, RecentConversation(key.chat, key.thread, time.time(), words))

    def view(self, user: str) -> dict[str, Any]:
        if not self.may_chat(user):
            return stranger_home_view()
        entries = list(reversed(self._recent.get(user, {}).items()))  # newest first
        agents = self._latest_agent_menu
        if entries:  # the agent's commands where the person last wrote, when known
            agents = self._agent_menus.get(entries[0][0], agents)
        return home_view(self._ours, agents, [item for _, item in entries])

    async def publish(self, api: WebApi, user: str) -> None:
        """Publish `user`'s Home view (`views.publish`, limited by method, not by a channel)."""
        try:
            await api.unpaced(api.web.views_publish, user_id=user, view=self.view(user))
        except SurfaceError as exc:
            log.warning("slack: could not publish App Home for %s: %s", user, exc)
