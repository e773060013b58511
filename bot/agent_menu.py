"""The agent's own commands in the surface's command menu for one conversation (Telegram's
per-chat menu, where `capabilities.agent_menus`): updated after a turn when the list changed."""

from __future__ import annotations

import logging

import anyio

from acp import AgentCommand
from bot.services import ConversationServices
from surfaces.base import ConversationKey, MenuCommand, Surface
from surfaces.text import ellipsize

log = logging.getLogger(__name__)

# The agent's commands put into a platform menu, and how long each field may be.
MENU_LIMIT = 100
MENU_NAME_CHARS, MENU_TEXT_CHARS = 64, 200


class AgentMenu:
    """What the surface shows (`shown`, handed on to a released conversation's next runner) and
    what it should show; one update at a time, in a task of the app's (never on the frame
    reader's stack), a failure logged and tried again after the next turn."""

    def __init__(
        self, services: ConversationServices, surface: Surface, key: ConversationKey
    ) -> None:
        self.services = services
        self.surface = surface
        self.key = key
        self.shown: tuple[AgentCommand, ...] = ()
        self._wanted: tuple[AgentCommand, ...] = ()
        self._syncing = False

    def sync(self, commands: tuple[AgentCommand, ...]) -> None:
        """Show `commands` (the session's list) if the surface shows something else."""
        if not self.surface.capabilities.agent_menus:
            return
        self._wanted = commands
        if self._wanted != self.shown and not self._syncing:
            self._syncing = True
            self.services.spawn(self._update)

    async def _update(self) -> None:
        try:
            while self._wanted != self.shown:
                wanted = self._wanted
                menu = [
                    MenuCommand(
                        ellipsize(command.name, MENU_NAME_CHARS),
                        ellipsize(" ".join(command.description.split()), MENU_TEXT_CHARS),
                        ellipsize(" ".join(command.hint.split()), MENU_TEXT_CHARS),
                    )
                    for command in wanted[:MENU_LIMIT]
                ]
                try:
                    with anyio.fail_after(self.services.settings.request_timeout):
                        await self.surface.agent_command_menu(self.key, menu)
                except Exception as exc:  # the menu is a convenience; /help lists them too
                    log.warning("could not update %s's agent command menu: %r", self.key, exc)
                    return
                self.shown = wanted
        finally:
            self._syncing = False
