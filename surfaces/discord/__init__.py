"""The Discord surface (discord.py): DMs, threads opened by a mention in allowed channels, slash
commands and `!` commands, approval buttons."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from config import Settings
from surfaces.plugin import SurfaceEntry, TokenShape

if TYPE_CHECKING:
    from surfaces.discord.adapter import DiscordSurface

__all__ = ["ENTRY", "create_surface"]


def create_surface(settings: Settings) -> DiscordSurface:
    """The bot named by SWITCHBOARD_DISCORD__TOKEN, with the production pacing."""
    from surfaces.discord.adapter import DiscordSurface

    return DiscordSurface(settings.discord, answer_wait=settings.approval_timeout)


ENTRY = SurfaceEntry(
    name="discord",
    label="Discord",
    enabled_by="SWITCHBOARD_DISCORD__TOKEN (and SWITCHBOARD_DISCORD__ALLOWED_USERS)",
    is_configured=lambda settings: bool(settings.discord.token),
    build=create_surface,
    tokens=(
        TokenShape(
            "token",
            "Discord",
            re.compile(r"^[\w-]{20,}\.[\w-]{4,}\.[\w-]{20,}$"),
            "three dot-separated parts",
        ),
    ),
)
