"""Which coordination a store gets (bot/cluster_choice.py): one process on SQLite, replicas on
Redis (also behind the outage wrapper), which need the cluster key; and a SQLite start never
loads the Redis client."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cluster import SoloCluster
from bot.cluster_choice import open_cluster
from bot.redis_cluster import RedisCluster
from bot.store import open_store
from config import ConfigError
from tests.store_backends import CLUSTER_KEY

ROOT = Path(__file__).resolve().parent.parent


def test_a_sqlite_store_gets_one_process_and_needs_no_key(tmp_path: Path) -> None:
    cluster = open_cluster("r1", 30.0, open_store(str(tmp_path / "state.db")))
    assert isinstance(cluster, SoloCluster)
    assert (cluster.replica, cluster.ttl, cluster.shared) == ("r1", 30.0, False)


def test_a_redis_store_behind_the_outage_wrapper_gets_replicas_with_the_key() -> None:
    store = open_store("redis://127.0.0.1:1/0")  # nothing is connected until first use
    with pytest.raises(ConfigError) as refused:
        open_cluster("r1", 30.0, store)
    assert refused.value.setting == "SWITCHBOARD_CLUSTER_KEY"
    cluster = open_cluster("r1", 30.0, store, key=CLUSTER_KEY)
    assert isinstance(cluster, RedisCluster)
    assert cluster.shared


def test_a_sqlite_start_never_imports_the_redis_client(tmp_path: Path) -> None:
    code = (
        "import sys, bot.app, bot.cli\n"
        "from bot.cluster_choice import open_cluster\n"
        "from bot.store import open_store\n"
        f"open_cluster('r1', 30.0, open_store({str(tmp_path / 'state.db')!r}))\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] == 'redis'"
        " or name in ('bot.store.redis', 'bot.redis_cluster')))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout.strip() == "[]"
