"""The Telegram surface (python-telegram-bot): private chats and, where allowed, group topics."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from config import Settings
from surfaces.plugin import SurfaceEntry, TokenShape

# Opt in to PTB's timedelta durations (RetryAfter.retry_after): the int form is deprecated and
# warns every time a 429 is parsed. Set here, before any module of this package imports PTB.
os.environ.setdefault("PTB_TIMEDELTA", "true")

if TYPE_CHECKING:
    from surfaces.telegram.adapter import TelegramSurface

__all__ = ["ENTRY", "create_surface"]


def create_surface(settings: Settings) -> TelegramSurface:
    """The bot named by SWITCHBOARD_TELEGRAM__TOKEN, with the production pacing."""
    from surfaces.telegram.adapter import TelegramSurface

    return TelegramSurface(settings.telegram)


ENTRY = SurfaceEntry(
    name="telegram",
    label="Telegram",
    enabled_by="SWITCHBOARD_TELEGRAM__TOKEN (and SWITCHBOARD_TELEGRAM__ALLOWED_USERS)",
    is_configured=lambda settings: bool(settings.telegram.token),
    build=create_surface,
    tokens=(
        TokenShape(
            "token", "Telegram", re.compile(r"^\d{5,}:[A-Za-z0-9_-]{30,}$"), "<digits>:<secret>"
        ),
    ),
)
