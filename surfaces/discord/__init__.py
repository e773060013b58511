"""The Discord surface (discord.py): DMs, threads opened by a mention in allowed channels, slash
commands and `!` commands, approval buttons."""

from __future__ import annotations

from config import Settings
from surfaces.discord.adapter import DiscordSurface

__all__ = ["DiscordSurface", "create_surface"]


def create_surface(settings: Settings) -> DiscordSurface:
    """The bot named by SWITCHBOARD_DISCORD__TOKEN, with the production pacing."""
    return DiscordSurface(settings.discord)
