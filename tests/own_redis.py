"""A redis-server of one test's own, which the test may stop, restart on the same port, pause
(SIGSTOP) and resume: the outage and TLS tests cannot use the shared session server of
tests/store_backends.py, which every other store test relies on."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import redis

from tests.store_backends import INSTALL_HINT, _free_port

__all__ = ["OwnRedis"]


class OwnRedis:
    """`redis-server` on a fixed free port with extra `args`; `ping` is how readiness is seen,
    with `client_args` for redis-py (a password, TLS)."""

    def __init__(
        self,
        workdir: Path,
        args: Sequence[str] = (),
        *,
        client_args: dict[str, object] | None = None,
        tls: bool = False,
    ) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail(INSTALL_HINT)
        self.binary = binary
        self.port = _free_port()
        self.workdir = workdir
        self.args = list(args)
        self.client_args = client_args or {}
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        port = (
            ["--port", "0", "--tls-port", str(self.port)]
            if self.tls
            else ["--port", str(self.port)]
        )
        log = self.workdir / "redis.log"  # redis-server says what is wrong here, not on stderr
        command = [self.binary, *port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                   "--dir", str(self.workdir), "--logfile", str(log), *self.args]  # fmt: skip
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(host="127.0.0.1", port=self.port, ssl=self.tls, **self.client_args)  # type: ignore[arg-type]
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    client.ping()
                    return
                except redis.exceptions.ConnectionError:
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        self.stop()
                        said = log.read_text() if log.exists() else ""
                        pytest.fail(f"redis-server did not start: {said.strip()[-2000:]}")
                    time.sleep(0.05)
        finally:
            client.close()

    def stop(self) -> None:
        """Gone, as a crashed or restarted server is: connections refused."""
        proc, self.proc = self.proc, None
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
        """Still listening but silent, as a hung server or a dead link is: no answer."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def raw(self) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            ssl=self.tls,
            decode_responses=True,
            **self.client_args,  # type: ignore[arg-type]
        )
