"""Discord's shards among replicas: each shard's gateway connection is held by exactly one.

With the cluster's leases (`surfaces.base.ClusterLeases`), shard `i` of `N` belongs to
`replicas()[i % n]` (the alive replicas' sorted ids, the same list on every replica), and the
replica connects it only while it holds the lease `discord-shard:<application id>:<i>`. Every
`ttl / 3` seconds each replica reads the replica set and:

- lets go of a shard no longer its own (a replica joined) once it has disconnected it, so the
  new owner can take it at once;
- takes (or renews) the leases of its own shards; one still held by the previous owner is taken
  when that replica lets go or its lease expires (it died), on a later round;
- connects exactly the shards whose lease it holds (`connect`, which may restart the client),
  and drops a shard whose lease moved, or whose last successful hold is a TTL old while the
  leases are unavailable (from then on another replica may take it).

A shard it could not disconnect (the client restart failed) stays held and renewed, so no other
replica connects it at the same time; it is dropped again on the next round."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import anyio

from surfaces.base import ClusterLeases
from surfaces.errors import LeasesUnavailable

log = logging.getLogger(__name__)

Connect = Callable[[frozenset[int]], Awaitable[frozenset[int]]]


def shard_lease_name(application_id: int, shard: int) -> str:
    return f"discord-shard:{application_id}:{shard}"


def share_of(replica: str, replicas: Sequence[str], shard_count: int) -> frozenset[int]:
    """The shards `replica` should hold: shard i goes to the i % n-th of the sorted replicas."""
    ordered = sorted(set(replicas))
    if replica not in ordered:
        return frozenset()  # the others count this replica as gone: they take its shards
    return frozenset(i for i in range(shard_count) if ordered[i % len(ordered)] == replica)


class ShardLeases:
    """Keeps `connect`ed exactly the shards this replica holds the lease of."""

    def __init__(
        self,
        leases: ClusterLeases,
        application_id: int,
        shard_count: int,
        *,
        connect: Connect,
        stop_timeout: float,
    ) -> None:
        self._leases = leases
        self._application = application_id
        self.shard_count = shard_count
        self._connect = connect
        self._stop_timeout = stop_timeout
        self.connected: frozenset[int] = frozenset()
        self._held_at: dict[int, float] = {}  # shard -> when its last successful hold was asked
        self._outage = False

    def _name(self, shard: int) -> str:
        return shard_lease_name(self._application, shard)

    async def run(self) -> None:
        """Until cancelled; then disconnect every shard and let their leases go (bounded)."""
        try:
            while True:
                asked = anyio.current_time()
                await self._round(asked)
                wake = asked + self._leases.ttl / 3
                if self._held_at:
                    wake = min(wake, min(self._held_at.values()) + self._leases.ttl)
                await anyio.sleep_until(max(wake, anyio.current_time() + 0.01))
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._stop_timeout):
                self.connected = await self._connect(frozenset())
                for shard in sorted(set(self._held_at) - self.connected):
                    await self._let_go(shard)

    async def _round(self, asked: float) -> None:
        mine = await self._share()
        if mine is not None:
            for shard in sorted(mine | self.connected):
                held = await self._hold(shard)
                if held is None:
                    break
                if held:
                    self._held_at[shard] = asked
                else:
                    self._held_at.pop(shard, None)
        now = anyio.current_time()
        live = {shard for shard, at in self._held_at.items() if now < at + self._leases.ttl}
        for shard in set(self._held_at) - live:
            del self._held_at[shard]  # expired in the store by now: no longer ours to connect
        target = frozenset(live if mine is None else live & mine)
        if target != self.connected:
            before = self.connected
            with anyio.CancelScope(shield=True):  # a client restart is not left half done
                self.connected = await self._connect(target)
            log.info(
                "discord: shards %s of %d connected here (were %s)",
                sorted(self.connected),
                self.shard_count,
                sorted(before),
            )
        for shard in sorted(live - self.connected - (mine or frozenset())):
            await self._let_go(shard)  # disconnected, and another replica's now

    async def _share(self) -> frozenset[int] | None:
        try:
            alive = await self._leases.replicas()
        except LeasesUnavailable as exc:
            self._unavailable(exc)
            return None
        return share_of(self._leases.replica, alive, self.shard_count)

    async def _hold(self, shard: int) -> bool | None:
        try:
            held = await self._leases.hold(self._name(shard))
        except LeasesUnavailable as exc:
            self._unavailable(exc)
            return None
        if self._outage:
            log.info("discord: the cluster's leases are reachable again")
            self._outage = False
        return held

    async def _let_go(self, shard: int) -> None:
        self._held_at.pop(shard, None)
        try:
            await self._leases.let_go(self._name(shard))
        except LeasesUnavailable as exc:  # it expires on its own within the TTL
            log.warning("discord: could not let shard %d's lease go: %s", shard, exc.reason)

    def _unavailable(self, exc: LeasesUnavailable) -> None:
        if not self._outage:
            log.warning("discord: the cluster's leases are unavailable: %s", exc.reason)
        self._outage = True
