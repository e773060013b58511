"""Long polling among replicas: one replica polls at a time, the others stand by.

Telegram hands each update to whoever calls `getUpdates`; two replicas polling at once would
split (and, before an offset is confirmed, repeat) one bot's updates. With the cluster's leases
(`surfaces.base.ClusterLeases`), the replica holding `telegram-poller:<bot id>` polls:

- every `ttl / 3` seconds each replica calls `hold`: the poller renews, a standby tries to take
  the lease and starts polling when it wins (the poller died, or let go at a clean stop);
- the poller stops polling at once when `hold` answers False (the lease moved), and when the
  leases stayed unavailable until `ttl` had passed since the last successful hold (from then
  on another replica may take the lease), measured from when that hold was asked, so the stop
  comes no later than the lease's expiry in the store;
- a clean stop stops polling first (PTB confirms the offset of what it fetched, so the next
  poller does not receive it again), then lets go, so a standby takes over without waiting.

A standby replica is healthy: the adapter's `connected` (what /readyz reads) stays true."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from surfaces.base import ClusterLeases
from surfaces.errors import LeasesUnavailable, SurfaceError

log = logging.getLogger(__name__)


def poller_lease_name(bot_id: int) -> str:
    """The lease's name: the bot's numeric id (the token's prefix), never the token."""
    return f"telegram-poller:{bot_id}"


class PollerLease:
    """Polls (through `start` / `stop`) only while this replica holds the lease `name`."""

    def __init__(
        self,
        leases: ClusterLeases,
        name: str,
        *,
        start: Callable[[], Awaitable[None]],
        stop: Callable[[], Awaitable[None]],
        stop_timeout: float,
    ) -> None:
        self._leases = leases
        self.name = name
        self._start = start
        self._stop = stop
        self._stop_timeout = stop_timeout
        self.polling = False
        self._last_held: float | None = None  # when the last successful hold was asked
        self._outage = False

    async def run(self) -> None:
        """Until cancelled; then stop polling and let the lease go (shielded, bounded)."""
        try:
            await self._follow()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._stop_timeout):
                await self._stop_polling("this replica is stopping")
                try:
                    await self._leases.let_go(self.name)
                except LeasesUnavailable as exc:  # it expires on its own within the TTL
                    log.warning("telegram: could not let the poller lease go: %s", exc.reason)

    async def _follow(self) -> None:
        interval = self._leases.ttl / 3
        while True:
            asked = anyio.current_time()
            held = await self._hold()
            if held:
                self._last_held = asked
                await self._start_polling()
            elif held is False:
                await self._stop_polling("another replica holds the poller lease")
            elif self.polling and self._expired():
                await self._stop_polling("the cluster's leases stayed unavailable for a TTL")
            wake = asked + interval
            if self.polling and self._last_held is not None:
                wake = min(wake, self._last_held + self._leases.ttl)
            await anyio.sleep_until(wake)

    def _expired(self) -> bool:
        last = self._last_held
        return last is None or anyio.current_time() >= last + self._leases.ttl

    async def _hold(self) -> bool | None:
        """The lease's answer; None while the leases cannot be reached. While polling, the
        answer is not awaited past the lease's own expiry."""
        limit = float("inf")
        if self.polling and self._last_held is not None:
            limit = self._last_held + self._leases.ttl - anyio.current_time()
        with anyio.move_on_after(max(0.0, limit)):
            try:
                held = await self._leases.hold(self.name)
            except LeasesUnavailable as exc:
                if not self._outage:
                    log.warning("telegram: the cluster's leases are unavailable: %s", exc.reason)
                self._outage = True
                return None
            if self._outage:
                log.info("telegram: the cluster's leases are reachable again")
            self._outage = False
            return held
        return None

    async def _start_polling(self) -> None:
        if self.polling:
            return
        try:
            await self._start()
        except SurfaceError as exc:  # the lease stays ours; the next renewal tries again
            log.warning("telegram: could not start polling: %s", exc)
            return
        self.polling = True
        log.info("telegram: polling for updates (this replica holds %s)", self.name)

    async def _stop_polling(self, why: str) -> None:
        if not self.polling:
            return
        self.polling = False
        await self._stop()
        log.info("telegram: stopped polling, %s; standing by", why)
