"""Discord's shards among replicas: each shard's gateway connection is held by exactly one.

With the cluster's leases (`surfaces.base.ClusterLeases`), shard `i` of `N` belongs to
`replicas()[i % n]` (the alive replicas' sorted ids, the same list on every replica), and the
replica connects it only while it holds the lease `discord-shard:<application id>:<i>`. The rounds
of holding are `surfaces.lease_follow`'s: each reads the replica set, so a replica

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

from surfaces.base import ClusterLeases
from surfaces.lease_follow import LeaseFollower

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
        self.shard_count = shard_count
        self._connect = connect
        self._by_name = {shard_lease_name(application_id, i): i for i in range(shard_count)}
        self._follower = LeaseFollower(
            leases,
            wanted=self._share,
            apply=self._apply,
            stop_timeout=stop_timeout,
            label="discord",
        )

    @property
    def connected(self) -> frozenset[int]:
        return self._shards(self._follower.active)

    async def run(self) -> None:
        """Until cancelled; then disconnect every shard and let their leases go (bounded)."""
        await self._follower.run()

    def _shards(self, names: frozenset[str]) -> frozenset[int]:
        return frozenset(self._by_name[name] for name in names if name in self._by_name)

    def _names(self, shards: frozenset[int]) -> frozenset[str]:
        return frozenset(name for name, shard in self._by_name.items() if shard in shards)

    async def _share(self) -> frozenset[str]:
        alive = await self._leases.replicas()
        return self._names(share_of(self._leases.replica, alive, self.shard_count))

    async def _apply(self, held: frozenset[str]) -> frozenset[str]:
        before = self.connected
        now = await self._connect(self._shards(held))
        log.info(
            "discord: shards %s of %d connected here (were %s)",
            sorted(now),
            self.shard_count,
            sorted(before),
        )
        return self._names(now)
