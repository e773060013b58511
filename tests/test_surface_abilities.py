"""Surfaces' optional abilities (surfaces/abilities.py), found once when the bot starts serving:
which surface gets the operations view, leases, relayed files and HTTP routes, and how each
counts for readiness. The dashboard's `connected` is a WebSocket handler, not a report of a
connection: it is counted connected because the bot's own HTTP server serves it, by rule."""

from __future__ import annotations

from typing import Any

from config.settings import DashboardSettings
from surfaces.abilities import (
    RebuildsFiles,
    ServesRoutes,
    ShowsOperations,
    SurfaceAbilities,
    TakesLeases,
)
from surfaces.dashboard.adapter import DashboardSurface
from surfaces.dashboard.auth import digest_of
from tests.engine_helpers import ScriptedSurface

DASHBOARD: dict[str, Any] = {
    "enabled": True,
    "tokens": {"root": digest_of("root-secret-token")},
    "admins": ["root"],
}


class Reporting(ScriptedSurface):
    """A platform surface that reports its connection (as Telegram and Discord do)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.up = True

    @property
    def connected(self) -> bool:
        return self.up


def test_the_dashboard_shows_operations_and_serves_routes_but_reports_no_connection() -> None:
    dashboard = DashboardSurface(DashboardSettings(**DASHBOARD), min_edit_interval=0.01)
    found = SurfaceAbilities.of([dashboard])  # type: ignore[list-item]  # any Surface serves
    assert found.names == ["dashboard"]
    assert list(found.operations) == [dashboard] and list(found.route_servers) == [dashboard]
    assert isinstance(dashboard, ShowsOperations) and isinstance(dashboard, ServesRoutes)
    assert not isinstance(dashboard, TakesLeases) and not isinstance(dashboard, RebuildsFiles)
    assert "dashboard" not in found.connections  # its `connected` method is no report
    assert found.connected("dashboard")  # served by the bot's own HTTP server


def test_a_reporting_surface_counts_as_it_reports_and_a_silent_one_as_connected() -> None:
    telegram, console = Reporting("telegram"), ScriptedSurface("console")
    found = SurfaceAbilities.of([telegram, console])  # type: ignore[list-item]
    assert set(found.connections) == {"telegram"}
    assert found.connected("telegram") and found.connected("console")
    telegram.up = False  # read at each probe; only which surfaces report is found once
    assert not found.connected("telegram") and found.connected("console")
    assert not found.operations and not found.lease_takers and not found.route_servers
