"""Which chat surfaces exist and which are configured. The only place `bot/` names adapters;
each is imported only when configured, so a missing platform SDK breaks only that platform."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from config import ConfigError, Settings
from config.settings import SurfaceAccess
from surfaces.base import Surface


@dataclass(frozen=True, slots=True)
class SurfaceEntry:
    name: str
    label: str
    module: str  # the package whose create_surface(settings) builds it; "" = not built yet
    enabled_by: str  # the settings that turn it on, for people
    is_configured: Callable[[Settings], bool]


SURFACES: tuple[SurfaceEntry, ...] = (
    SurfaceEntry(
        "telegram",
        "Telegram",
        "surfaces.telegram",
        "SWITCHBOARD_TELEGRAM__TOKEN (and SWITCHBOARD_TELEGRAM__ALLOWED_USERS)",
        lambda settings: bool(settings.telegram.token),
    ),
    SurfaceEntry(
        "slack",
        "Slack",
        "surfaces.slack",
        "SWITCHBOARD_SLACK__BOT_TOKEN with SWITCHBOARD_SLACK__APP_TOKEN (Socket Mode) or "
        "SWITCHBOARD_SLACK__SIGNING_SECRET (HTTP mode), and SWITCHBOARD_SLACK__ALLOWED_USERS",
        lambda settings: bool(settings.slack.bot_token),
    ),
    SurfaceEntry(
        "discord",
        "Discord",
        "surfaces.discord",
        "SWITCHBOARD_DISCORD__TOKEN (and SWITCHBOARD_DISCORD__ALLOWED_USERS)",
        lambda settings: bool(settings.discord.token),
    ),
)


def configured_surfaces(settings: Settings) -> list[Surface]:
    surfaces: list[Surface] = []
    for entry in SURFACES:
        if entry.is_configured(settings):
            if not entry.module:
                raise ConfigError(
                    entry.enabled_by.split()[0],
                    f"this version of Switchboard has no {entry.label} surface yet",
                )
            module = importlib.import_module(entry.module)
            surfaces.append(module.create_surface(settings))
    return surfaces


def terminal_surface() -> Surface:
    """The terminal on this process's stdin and stdout (`switchboard chat`)."""
    from surfaces import console

    return console.create_surface()


def how_to_enable() -> list[str]:
    return [f"{entry.label}: {entry.enabled_by}" for entry in SURFACES]


@dataclass(frozen=True, slots=True)
class NobodyAllowed:
    """A configured surface whose access lists name nobody: it would answer no one."""

    label: str
    setting: str  # the allowlist to fill in

    def warning(self) -> str:
        return (
            f"{self.label} is configured but {self.setting} is empty: nobody can use it. "
            "Set it to the platform user ids that may chat."
        )


def surfaces_nobody_can_use(settings: Settings) -> list[NobodyAllowed]:
    found = []
    for entry in SURFACES:
        access: SurfaceAccess = getattr(settings, entry.name)
        if entry.is_configured(settings) and access.nobody_allowed:
            found.append(
                NobodyAllowed(entry.label, f"SWITCHBOARD_{entry.name.upper()}__ALLOWED_USERS")
            )
    return found
