"""The state store's tests run against every `StateStore`: the embedded SQLite file and a real
Redis server. `RedisProcess` is one `redis-server` (stopped and started again on the same port on
request: the failover suites); `redis_server` starts one per test session (a random free port, no
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


class RedisProcess:
    """One `redis-server` on 127.0.0.1 (no persistence, its files in `workdir`): `start()` waits
    until it answers PING; `stop()` ends it; a second `start()` comes back on the same port, as a
    restarted Redis would (the failover suites stop and restart it mid-run)."""

    def __init__(self, workdir: Path, port: int | None = None, *, persistent: bool = False) -> None:
        self.workdir = workdir
        self.port = port or _free_port()
        # An append-only file synced on every write: a restart keeps everything, as deployed.
        self.persistent = persistent
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 20.0) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail(INSTALL_HINT)
        appendonly = ["--appendonly", "yes", "--appendfsync", "always"]
        if not self.persistent:
            appendonly = ["--appendonly", "no"]
        command = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                   *appendonly, "--dir", str(self.workdir)]  # fmt: skip
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._proc = proc
        client = redis.Redis.from_url(self.url)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    client.ping()
                    return
                except redis.exceptions.ConnectionError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        err = proc.stderr.read().decode() if proc.stderr else ""
                        self.stop()
                        pytest.fail(f"redis-server did not start: {err.strip()}")
                    time.sleep(0.05)
        finally:
            client.close()

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a redis-server of this test session's own."""
    server = RedisProcess(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


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
