"""The one loop that keeps a surface's platform connections in step with the cluster's leases.

A surface that several replicas share (Telegram's long polling, Discord's shards) may use a
connection only while this replica holds that connection's lease (`surfaces.base.ClusterLeases`).
`LeaseFollower` runs the rounds every surface needs, each `ttl / 3` seconds:

- asks which leases this replica should hold now (`wanted`; None while the leases cannot be
  reached) and takes or renews each of them, and those it still uses;
- counts a lease as held for one TTL from when its last successful hold was asked, so a replica
  cut off from the store stops using it no later than the lease expires there (from then on
  another replica may take it); a hold is not awaited past that instant either;
- asks the surface to use exactly the held leases it wants (`apply`, which says what it uses
  afterwards: a connection that failed to start is tried again on the next round, its lease kept);
- lets go of a lease it holds but no longer wants once the surface stopped using it, so another
  replica takes it at once;
- when cancelled: stops using everything, then lets every lease go (shielded, bounded).

The surface decides what a lease means (`apply`); the rules of holding are written only here."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from surfaces.base import ClusterLeases
from surfaces.errors import LeasesUnavailable

log = logging.getLogger(__name__)

Wanted = Callable[[], Awaitable[frozenset[str]]]
Apply = Callable[[frozenset[str]], Awaitable[frozenset[str]]]

_MIN_PAUSE = 0.01  # seconds: a round that overran its schedule still yields before the next


class LeaseFollower:
    """Keeps `apply`ed exactly the wanted leases this replica holds (see the module's rules)."""

    def __init__(
        self,
        leases: ClusterLeases,
        *,
        wanted: Wanted,
        apply: Apply,
        stop_timeout: float,
        label: str,
    ) -> None:
        self._leases = leases
        self._wanted = wanted
        self._apply = apply
        self._stop_timeout = stop_timeout
        self._label = label  # the surface's name, for log lines
        self.active: frozenset[str] = frozenset()  # what the surface uses now
        self._held_at: dict[str, float] = {}  # lease -> when its last successful hold was asked
        self._outage = False

    async def run(self) -> None:
        """Until cancelled; then stop using every lease and let them go (shielded, bounded)."""
        try:
            while True:
                asked = anyio.current_time()
                await self._round(asked)
                wake = asked + self._leases.ttl / 3
                if self._held_at:
                    wake = min(wake, min(self._held_at.values()) + self._leases.ttl)
                await anyio.sleep_until(max(wake, anyio.current_time() + _MIN_PAUSE))
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._stop_timeout):
                if self.active:
                    self.active = await self._apply(frozenset())
                for name in sorted(set(self._held_at) - self.active):
                    await self._let_go(name)

    async def _round(self, asked: float) -> None:
        wanted = await self._ask_wanted()
        if wanted is not None:
            for name in sorted(wanted | self.active):
                held = await self._hold(name)
                if held is None:
                    break  # unreachable: the others would fail alike until the next round
                if held:
                    self._held_at[name] = asked
                else:
                    self._held_at.pop(name, None)
        now = anyio.current_time()
        live = {name for name, at in self._held_at.items() if now < at + self._leases.ttl}
        for name in set(self._held_at) - live:
            del self._held_at[name]  # expired in the store by now: no longer ours to use
        target = frozenset(live if wanted is None else live & wanted)
        if target != self.active:
            with anyio.CancelScope(shield=True):  # a connection change is not left half done
                self.active = await self._apply(target)
        for name in sorted(live - self.active - (wanted or frozenset())):
            await self._let_go(name)  # no longer used here, and another replica's now

    async def _ask_wanted(self) -> frozenset[str] | None:
        try:
            return await self._wanted()
        except LeasesUnavailable as exc:
            self._unavailable(exc)
            return None

    async def _hold(self, name: str) -> bool | None:
        """The lease's answer; None while the leases cannot be reached. While a lease is in
        use, the answer is not awaited past the instant the earliest one expires in the store."""
        limit = float("inf")
        if self.active and self._held_at:
            limit = min(self._held_at.values()) + self._leases.ttl - anyio.current_time()
        with anyio.move_on_after(max(0.0, limit)):
            try:
                held = await self._leases.hold(name)
            except LeasesUnavailable as exc:
                self._unavailable(exc)
                return None
            if self._outage:
                log.info("%s: the cluster's leases are reachable again", self._label)
                self._outage = False
            return held
        return None

    async def _let_go(self, name: str) -> None:
        self._held_at.pop(name, None)
        try:
            await self._leases.let_go(name)
        except LeasesUnavailable as exc:  # it expires on its own within the TTL
            log.warning("%s: could not let the lease %s go: %s", self._label, name, exc.reason)

    def _unavailable(self, exc: LeasesUnavailable) -> None:
        if not self._outage:
            log.warning("%s: the cluster's leases are unavailable: %s", self._label, exc.reason)
        self._outage = True
