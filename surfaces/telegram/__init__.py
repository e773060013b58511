"""The Telegram surface (python-telegram-bot): private chats and, where allowed, group topics."""

from __future__ import annotations

from config import Settings
from surfaces.telegram.adapter import TelegramSurface

__all__ = ["TelegramSurface", "create_surface"]


def create_surface(settings: Settings) -> TelegramSurface:
    """The bot named by SWITCHBOARD_TELEGRAM__TOKEN, with the production pacing."""
    return TelegramSurface(settings.telegram)
