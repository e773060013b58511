"""The Redis store over TLS (`rediss://`, the CA given as `?ssl_ca_certs=/path`) and with a
password (`redis://:secret@host`, and an ACL user `redis://user:secret@host`), each against a
redis-server of the test's own: a few operations work; an untrusted certificate and a refused
password are one sentence naming SWITCHBOARD_STATE, not an outage to wait out, and the secret
appears neither in the sentence nor in any log line."""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.conversation import Binding
from bot.faults import log_fault
from bot.store import DeliveryEntry, StateStore, StoreError, StoreUnavailable, open_store
from bot.store.redis import RedisStateStore
from surfaces.base import ConversationKey
from tests.store_backends import RedisProcess

pytestmark = [pytest.mark.anyio]

KEY = ConversationKey("telegram", "chat-1")
SECRET = "s3cret-pass"
WRONG = "wr0ng-pass"


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def make_certificates(where: Path) -> tuple[Path, Path, Path]:
    """A self-signed CA and a server certificate for 127.0.0.1 it signed: (ca, cert, key)."""
    ca_key, ca, key, csr, cert = (
        where / n for n in ("ca.key", "ca.crt", "s.key", "s.csr", "s.crt")
    )
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2",
             "-subj", "/CN=switchboard test CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    _openssl("req", "-new", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1")
    extensions = where / "server.ext"
    extensions.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    _openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
             "-out", cert, "-days", "2", "-extfile", extensions)  # fmt: skip
    return ca, cert, key


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[RedisProcess, Path]]:
    ca, cert, key = make_certificates(tmp_path)
    args = ["--tls-cert-file", str(cert), "--tls-key-file", str(key),
            "--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no"]  # fmt: skip
    own = RedisProcess(tmp_path, args=args, client_args={"ssl_ca_certs": str(ca)}, tls=True)
    own.start()
    try:
        yield own, ca
    finally:
        own.stop()


async def a_few_operations(store: StateStore) -> None:
    binding = Binding("session-1", "kiro", "/work", "model-a", 1, "alpha", "kiro")
    await store.put_binding(KEY, binding)
    assert await store.get_binding(KEY) == binding
    assert await store.claim_event("telegram:1", 60)
    assert not await store.claim_event("telegram:1", 60)
    await store.ledger_put(DeliveryEntry("e-1", KEY, "the answer", time.time()))
    assert [e.entry_id for e in await store.ledger_pending()] == ["e-1"]
    await store.ledger_done("e-1")
    assert await store.ledger_pending() == []
    await store.check_writable()


async def test_rediss_with_the_ca_in_the_url_works(tls_server: tuple[RedisProcess, Path]) -> None:
    server, ca = tls_server
    store = open_store(f"{server.url}?ssl_ca_certs={ca}")
    try:
        await a_few_operations(store)
    finally:
        await store.aclose()
    with server.raw() as raw:  # it really went to this TLS server
        assert raw.get("switchboard:meta:checked") == "ok"


async def test_rediss_without_the_ca_is_one_sentence_not_an_outage(
    tls_server: tuple[RedisProcess, Path],
) -> None:
    server, _ = tls_server
    store = open_store(server.url, wait=30)  # a wait that would show if it were waited out
    started = time.monotonic()
    try:
        with pytest.raises(StoreError) as raised:
            await store.check_writable()
        with pytest.raises(StoreError) as raised_again:
            await store.get_binding(KEY)
    finally:
        await store.aclose()
    assert time.monotonic() - started < 30
    for error in (raised.value, raised_again.value):
        assert not isinstance(error, StoreUnavailable)
        assert "TLS certificate is not trusted" in error.reason
        assert "SWITCHBOARD_STATE" in error.reason


# ---- passwords ---------------------------------------------------------------------------------


@pytest.fixture
def password_server(tmp_path: Path) -> Iterator[RedisProcess]:
    args = ["--requirepass", SECRET, "--user", "alice", "on", f">{SECRET}", "~*", "&*", "+@all"]
    own = RedisProcess(tmp_path, args=args, client_args={"password": SECRET})
    own.start()
    try:
        yield own
    finally:
        own.stop()


def with_credentials(server: RedisProcess, credentials: str) -> str:
    return server.url.replace("redis://", f"redis://{credentials}@")


@pytest.mark.parametrize("user", ["", "alice"])
async def test_a_password_and_an_acl_user_work(password_server: RedisProcess, user: str) -> None:
    url = with_credentials(password_server, f"{user}:{SECRET}")
    store = open_store(url)
    try:
        await a_few_operations(store)
    finally:
        await store.aclose()
    assert SECRET not in RedisStateStore(url).location


@pytest.mark.parametrize("user", ["", "alice"])
async def test_a_wrong_password_is_one_sentence_with_the_secret_redacted_also_in_logs(
    password_server: RedisProcess, user: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = with_credentials(password_server, f"{user}:{WRONG}")
    store = open_store(url, wait=30)
    started = time.monotonic()
    try:
        with pytest.raises(StoreError) as raised:
            await store.claim_event("telegram:1", 60)
        log_fault(raised.value, "handling an event", KEY, None)  # the app's line for it
    finally:
        await store.aclose()
    assert time.monotonic() - started < 30  # refused is an answer: not waited out
    error = raised.value
    assert not isinstance(error, StoreUnavailable)
    sentence = str(error)
    assert sentence.startswith("The state store at redis://")
    assert f"{user}:***@127.0.0.1" in sentence
    assert "SWITCHBOARD_STATE" in sentence
    assert "\n" not in sentence
    assert WRONG not in sentence
    formatter = logging.Formatter("%(message)s")
    logged = "\n".join(formatter.format(record) for record in caplog.records)
    assert "refused the user name or password" in logged
    assert WRONG not in logged
    assert SECRET not in logged


async def test_no_password_where_one_is_required_is_the_same_sentence(
    password_server: RedisProcess,
) -> None:
    store = RedisStateStore(password_server.url)
    try:
        with pytest.raises(StoreError, match="refused the user name or password") as raised:
            await store.check_writable()
    finally:
        await store.aclose()
    assert not isinstance(raised.value, StoreUnavailable)
