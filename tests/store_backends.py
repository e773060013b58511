"""The state store's tests run against every `StateStore`: the embedded SQLite file and a real
Redis server. `RedisProcess` is one `redis-server` (stopped and started again on the same port on
request: the failover suites); `redis_server` starts one per test session (a random free port, no
persistence, stopped at the end); `backend` is parametrized over both, and each Redis test gets
an empty database."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from bot.store import SqliteStateStore, StateStore
from bot.store.redis import RedisStateStore

# What every test replica on Redis signs its relays with (SWITCHBOARD_CLUSTER_KEY).
CLUSTER_KEY = "test-cluster-key-" + "k" * 32

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
    """One `redis-server` on 127.0.0.1, its files in `workdir`: `start()` waits until it answers
    PING; `stop()` ends it (refused connections, as a crashed server); a second `start()` comes
    back on the same port, as a restarted Redis would; `pause()` / `resume()` (SIGSTOP / SIGCONT)
    make it listen but say nothing, as a hung server or a dead link. `persistent`: an append-only
    file synced on every write, so a restart keeps everything, as deployed. `args` go to the
    server (a password, an ACL user, TLS files), `client_args` to redis-py for the PING (and
    `raw`); `tls` serves on a TLS port only. What the server says goes to `redis.log`."""

    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        *,
        persistent: bool = False,
        args: Sequence[str] = (),
        client_args: dict[str, object] | None = None,
        tls: bool = False,
    ) -> None:
        self.workdir = workdir
        self.port = port or _free_port()
        self.persistent = persistent
        self.args = list(args)
        self.client_args = client_args or {}
        self.tls = tls
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"

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
        port = (
            ["--port", "0", "--tls-port", str(self.port)]
            if self.tls
            else ["--port", str(self.port)]
        )
        log = self.workdir / "redis.log"  # redis-server says what is wrong here, not on stderr
        command = [binary, *port, "--bind", "127.0.0.1", "--save", "", *appendonly,
                   "--dir", str(self.workdir), "--logfile", str(log), *self.args]  # fmt: skip
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._proc = proc
        client = self.raw()
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    client.ping()
                    return
                except redis.exceptions.ConnectionError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        self.stop()
                        said = log.read_text() if log.exists() else ""
                        pytest.fail(f"redis-server did not start: {said.strip()[-2000:]}")
                    time.sleep(0.05)
        finally:
            client.close()

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.send_signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def pause(self) -> None:
        assert self._proc is not None
        self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self._proc is not None
        self._proc.send_signal(signal.SIGCONT)

    def raw(self) -> redis.Redis:
        """A plain client on this server (to look under a store, or to check it answers)."""
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            ssl=self.tls,
            decode_responses=True,
            **self.client_args,  # type: ignore[arg-type]
        )


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


@pytest.fixture
def redis_url(redis_server: str) -> str:
    """The session's redis-server, emptied for this test."""
    with redis.Redis.from_url(redis_server) as client:
        client.flushdb()
    return redis_server
