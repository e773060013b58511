"""Long polling among replicas: one replica polls at a time, the others stand by.

Telegram hands each update to whoever calls `getUpdates`; two replicas polling at once would
split (and, before an offset is confirmed, repeat) one bot's updates. The replica holding the lease
`telegram-poller:<bot id>` polls; the rounds of holding it are `surfaces.lease_follow`'s, so:

- the poller renews every `ttl / 3` seconds; a standby takes the lease and starts polling when it
  wins (the poller died, or let go at a clean stop);
- the poller stops at once when the lease moved, and when the leases stayed unavailable for a TTL
  since its last successful hold, so the stop comes no later than the lease's expiry in the store;
- a clean stop stops polling first (PTB confirms the offset of what it fetched, so the next
  poller does not receive it again), then lets go, so a standby takes over without waiting.

A standby replica is healthy: the adapter's `connected` (what /readyz reads) stays true."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from surfaces.base import ClusterLeases
from surfaces.errors import SurfaceError
from surfaces.lease_follow import LeaseFollower

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
        self.name = name
        self._start = start
        self._stop = stop
        self._wanted = frozenset({name})
        self._follower = LeaseFollower(
            leases,
            wanted=self._wants,
            apply=self._apply,
            stop_timeout=stop_timeout,
            label="telegram",
        )

    @property
    def polling(self) -> bool:
        return self.name in self._follower.active

    async def run(self) -> None:
        """Until cancelled; then stop polling and let the lease go (shielded, bounded)."""
        await self._follower.run()

    async def _wants(self) -> frozenset[str]:
        return self._wanted

    async def _apply(self, held: frozenset[str]) -> frozenset[str]:
        if self.name in held:
            if not self.polling:
                try:
                    await self._start()
                except SurfaceError as exc:  # the lease stays ours; the next round tries again
                    log.warning("telegram: could not start polling: %s", exc)
                    return frozenset()
                log.info("telegram: polling for updates (this replica holds %s)", self.name)
            return self._wanted
        if self.polling:
            await self._stop()
            log.info("telegram: stopped polling (this replica no longer holds %s)", self.name)
        return frozenset()
