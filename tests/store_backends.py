"""The state store's tests run against every `StateStore`: the embedded SQLite file and a real
Redis server. `redis_server` starts one `redis-server` per test session (a random free port, no
persistence, stopped at the end); `backend` is parametrized over both, and each Redis test gets
an empty database."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from bot.redis_store import RedisStateStore
from bot.store import SqliteStateStore, StateStore

INSTALL_HINT = (
    "redis-server is not installed; the state store's Redis tests need it:"
    " run tests/fakes/install_redis.sh (Debian: apt-get install -y redis-server)"
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a redis-server of this test session's own."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail(INSTALL_HINT)
    port = _free_port()
    workdir = tmp_path_factory.mktemp("redis")
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", str(workdir)]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read().decode() if proc.stderr else ""
                    pytest.fail(f"redis-server did not start: {err.strip()}")
                time.sleep(0.05)
        yield url
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


@dataclass
class Backend:
    """One store implementation: `open` makes a store on the same place each time, so a second
    one sees what the first wrote, as a restarted process would."""

    name: str
    location: str
    path: Path | None  # the SQLite file, None for Redis

    def open(self, clock: Callable[[], float] | None = None) -> StateStore:
        if self.path is not None:
            return (
                SqliteStateStore(self.path)
                if clock is None
                else SqliteStateStore(self.path, clock=clock)
            )
        if clock is None:
            return RedisStateStore(self.location)
        return RedisStateStore(self.location, clock=clock)

    def raw(self) -> redis.Redis:
        """A plain client on the Redis database (Redis only): for tests that look under the store."""
        assert self.path is None
        return redis.Redis.from_url(self.location, decode_responses=True)


@pytest.fixture(params=["sqlite", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        path = tmp_path / "state.db"
        return Backend("sqlite", str(path), path)
    url: str = request.getfixturevalue("redis_server")
    with redis.Redis.from_url(url) as client:
        client.flushdb()
    return Backend("redis", url, None)
