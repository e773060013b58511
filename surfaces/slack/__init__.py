"""The Slack surface: DMs and channel threads through slack-bolt, in Socket Mode (an app token) or
HTTP mode (a signing secret)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from config import Settings
from surfaces.plugin import SurfaceEntry, TokenShape

if TYPE_CHECKING:
    from surfaces.slack.adapter import SlackSurface

__all__ = ["ENTRY", "create_surface"]


def create_surface(settings: Settings) -> SlackSurface:
    """The bot named by SWITCHBOARD_SLACK__BOT_TOKEN, with the production pacing and streams."""
    from surfaces.slack.adapter import SlackSurface

    return SlackSurface(settings.slack, answer_wait=settings.approval_timeout)


ENTRY = SurfaceEntry(
    name="slack",
    label="Slack",
    enabled_by="SWITCHBOARD_SLACK__BOT_TOKEN with SWITCHBOARD_SLACK__APP_TOKEN (Socket Mode) or "
    "SWITCHBOARD_SLACK__SIGNING_SECRET (HTTP mode), and SWITCHBOARD_SLACK__ALLOWED_USERS",
    is_configured=lambda settings: bool(settings.slack.bot_token),
    build=create_surface,
    tokens=(
        TokenShape("bot_token", "Slack bot", re.compile(r"^xoxb-[A-Za-z0-9-]{10,}$"), "xoxb-..."),
        TokenShape("app_token", "Slack app", re.compile(r"^xapp-[A-Za-z0-9-]{10,}$"), "xapp-..."),
    ),
)
