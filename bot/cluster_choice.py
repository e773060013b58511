"""`open_cluster`: the coordination that fits the state store. Apart from bot/cluster.py (what
a cluster is) so that the Redis one (bot/redis_cluster.py), built on it, is only imported here."""

from __future__ import annotations

from bot.cluster import Cluster, SoloCluster, check_cluster_key
from bot.store import ScriptingStore, StateStore, inner_store

__all__ = ["open_cluster"]


def open_cluster(replica: str, ttl: float, store: StateStore, *, key: str = "") -> Cluster:
    """`RedisCluster` on a store whose server runs the cluster's scripts (a Redis store, also
    one behind `OutageTolerantStore`: the cluster's calls reach Redis itself, its own heartbeat
    decides about outages), which needs the cluster `key`; else `SoloCluster`."""
    backend = inner_store(store)
    if isinstance(backend, ScriptingStore):
        check_cluster_key(key)
        # Only with a Redis store: a SQLite start never loads the Redis client.
        from bot.redis_cluster import RedisCluster

        return RedisCluster(backend, replica, ttl)
    return SoloCluster(replica, ttl)
