"""discord.py, imported once for the whole package without the warning its voice support
raises: it imports `audioop`, which Python 3.11 deprecates, and this surface never uses voice.
The other modules of the package import discord.py from here, so whichever of them is imported
first, the warning is never raised (tests turn warnings into errors)."""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*audioop.*", category=DeprecationWarning)
    import discord
    from discord.gateway import DiscordWebSocket
    from discord.http import Route
    from discord.webhook.async_ import AsyncWebhookAdapter, async_context

__all__ = ["AsyncWebhookAdapter", "DiscordWebSocket", "Route", "async_context", "discord"]
