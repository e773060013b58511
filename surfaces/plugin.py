"""What a surface package says about itself, so the bot can use it without naming it.

Each chat-platform package (`surfaces/<name>/__init__.py`) exports `ENTRY = SurfaceEntry(...)`:
its name, the settings that turn it on, how to build it from `Settings`, the shapes of its
tokens (for `switchboard doctor`) and its settings section, whose access lists (`allowed_users`,
`approvers`, `admins`) say who may use it. The bot's surface registry finds the entries; nothing
else in `bot/` names a platform. Adding a surface is its package plus its settings class.

`build` imports the adapter (and so the platform SDK) only when called: reading an entry is
cheap, and a missing SDK breaks only the platform that needs it."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from config import Settings
from config.settings import ENV_PREFIX, SurfaceAccess
from surfaces.base import Surface

__all__ = ["SurfaceEntry", "TokenShape"]


@dataclass(frozen=True, slots=True)
class TokenShape:
    """What one of the surface's secrets looks like, checked without contacting the platform."""

    field: str  # the field of the surface's settings section, e.g. "bot_token"
    label: str  # for people, e.g. "Slack bot"
    pattern: re.Pattern[str]
    form: str  # the shape in words, e.g. "xoxb-..."


@dataclass(frozen=True, slots=True)
class SurfaceEntry:
    name: str  # as in ConversationKey.surface, and the name of its section in `Settings`
    label: str  # for people, e.g. "Telegram"
    enabled_by: str  # the settings that turn it on, for people
    is_configured: Callable[[Settings], bool]
    build: Callable[[Settings], Surface]
    tokens: tuple[TokenShape, ...] = ()

    def section(self, settings: Settings) -> SurfaceAccess:
        """The surface's settings: its tokens and its access lists."""
        section = getattr(settings, self.name)
        assert isinstance(section, SurfaceAccess), f"Settings.{self.name} is not a surface"
        return section

    def setting(self, field: str) -> str:
        """The environment variable of one of its settings, e.g. SWITCHBOARD_SLACK__BOT_TOKEN."""
        return f"{ENV_PREFIX}{self.name.upper()}__{field.upper()}"
