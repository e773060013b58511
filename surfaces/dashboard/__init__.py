"""The dashboard surface: a web chat (sign-in with an access token, conversations as tabs,
replies streamed over a WebSocket) on the HTTP server of `switchboard run`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from config import Settings
from surfaces.plugin import SurfaceEntry

if TYPE_CHECKING:
    from surfaces.dashboard.adapter import DashboardSurface

__all__ = ["ENTRY", "create_surface"]


def create_surface(settings: Settings) -> DashboardSurface:
    from surfaces.dashboard.adapter import DashboardSurface

    return DashboardSurface(settings.dashboard)


ENTRY = SurfaceEntry(
    name="dashboard",
    label="Dashboard",
    enabled_by="SWITCHBOARD_DASHBOARD__ENABLED=true with SWITCHBOARD_DASHBOARD__TOKENS and "
    "SWITCHBOARD_DASHBOARD__ALLOWED_USERS",
    is_configured=lambda settings: settings.dashboard.enabled,
    build=create_surface,
)
