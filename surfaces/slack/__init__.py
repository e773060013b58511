"""The Slack surface: DMs and channel threads through slack-bolt, in Socket Mode (an app token) or
HTTP mode (a signing secret)."""

from __future__ import annotations

from config import Settings
from surfaces.slack.adapter import SlackSurface

__all__ = ["SlackSurface", "create_surface"]


def create_surface(settings: Settings) -> SlackSurface:
    slack = settings.slack
    return SlackSurface(
        bot_token=slack.bot_token,
        app_token=slack.app_token,
        signing_secret=slack.signing_secret,
        api_url=slack.api_url,
        listen=slack.listen,
        port=slack.port,
    )
