"""The HTTP edge of `switchboard run` (issue 21 point 5), with real sockets against the real
server: `HttpServer` bound on 127.0.0.1 with the dashboard mounted and running, as `BotApp`
serves them. Sign-in limits under concurrency and behind a proxy, the Host check, sessions
ending (sign-out, expiry, a new sign-in) and their sockets closed, the header timeout, the
per-address connection cap, and what a person's pages can make the dashboard keep."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import anyio
import anyio.abc
import pytest

from bot.http_server import HttpServer
from config import ConfigError, load_settings
from config.settings import DashboardSettings, HttpSettings
from surfaces.base import ChoiceAnswer, Inbound
from surfaces.dashboard.adapter import DashboardSurface
from surfaces.dashboard.auth import COOKIE, digest_of
from surfaces.dashboard.convert import MAX_FRAME_TEXT
from surfaces.dashboard.sockets import CONVERSATION_BYTES, PERSON_BYTES, SESSION_ENDED
from tests.harness.clock import FakeClock

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

TOKENS = {"alice": "alice-edge-token", "bob": "bob-edge-token", "mallory": "mallory-edge-token"}
ACCESS: dict[str, Any] = {
    "enabled": True,
    "tokens": {user: digest_of(token) for user, token in TOKENS.items()},
    "allowed_users": ["alice", "bob"],  # mallory's token is valid, but she is on no list
}
BOUND = 10  # s: "promptly" in these tests, far above what any of it takes


@dataclass
class Edge:
    server: HttpServer
    surface: DashboardSurface
    received: list[Inbound | ChoiceAnswer]

    @property
    def port(self) -> int:
        assert self.server.port is not None
        return self.server.port

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, **kwargs: Any) -> aiohttp.ClientSession:
        """A browser of its own: its own cookies (kept for 127.0.0.1 too)."""
        return aiohttp.ClientSession(self.base, cookie_jar=aiohttp.CookieJar(unsafe=True), **kwargs)

    async def sign_in(
        self, client: aiohttp.ClientSession, token: str, **headers: str
    ) -> aiohttp.ClientResponse:
        answer = await client.post(
            "/api/sign-in", json={"token": token}, headers={"Origin": self.base, **headers}
        )
        await answer.read()
        return answer

    async def socket(
        self, client: aiohttp.ClientSession, **headers: str
    ) -> aiohttp.ClientWebSocketResponse:
        probe = await client.get("/api/session")
        csrf = (await probe.json())["csrf"]
        return await client.ws_connect(f"/ws?csrf={csrf}", headers={"Origin": self.base, **headers})


@asynccontextmanager
async def serving(clock: FakeClock | None = None, **http: Any) -> AsyncIterator[Edge]:
    settings = HttpSettings(listen="127.0.0.1", port=0, **http)
    surface = DashboardSurface(
        DashboardSettings(**ACCESS), clock=clock or FakeClock(1000.0), session_sweep=0.05
    )
    server = HttpServer(settings, readiness=_ready, metrics=_no_metrics)
    server.mount([surface])
    server.bind()
    received: list[Inbound | ChoiceAnswer] = []

    async def on_event(event: Inbound | ChoiceAnswer) -> None:
        received.append(event)

    async with anyio.create_task_group() as tg:
        await tg.start(_run_surface, surface, on_event)
        await tg.start(server.serve)
        try:
            yield Edge(server, surface, received)
        finally:
            tg.cancel_scope.cancel()


async def _run_surface(
    surface: DashboardSurface, on_event: Any, *, task_status: anyio.abc.TaskStatus[None]
) -> None:
    try:
        await surface.run(on_event, task_status=task_status)
    finally:
        await surface.close()


async def _ready() -> dict[str, str]:
    return {}


async def _no_metrics() -> bytes:
    return b""


async def new_tab(page: aiohttp.ClientWebSocketResponse) -> str:
    """Open a tab from this page; its id once the surface says it was created."""
    await page.send_json({"type": "new_tab"})
    with anyio.fail_after(BOUND):
        while (frame := await page.receive_json()).get("created") is not True:
            pass
    return str(frame["tab"])


async def _read_until_closed(page: aiohttp.ClientWebSocketResponse) -> None:
    async for _ in page:
        pass


async def closed_with(socket: aiohttp.ClientWebSocketResponse) -> int | None:
    """The code of the close frame the server ends this socket with (frames before it are
    skipped). Read from the frame: the server closes its side as soon as the frame is written,
    so the client's own close reply fails and its `close_code` says 1006 afterwards."""
    with anyio.fail_after(BOUND):
        while True:
            message = await socket.receive()
            if message.type is aiohttp.WSMsgType.CLOSE:
                return int(message.data)
            if message.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                return None


# ---- sign-in limits ------------------------------------------------------------------------
async def test_three_hundred_concurrent_wrong_tokens_get_the_limit_checked_and_429_after() -> None:
    async with serving(max_connections_per_address=1000) as edge:
        statuses: list[int] = []
        connector = aiohttp.TCPConnector(limit=0)
        async with edge.client(connector=connector) as client:

            async def wrong(n: int) -> None:
                statuses.append((await edge.sign_in(client, f"wrong-token-{n}")).status)

            async with anyio.create_task_group() as tg:
                for n in range(300):
                    tg.start_soon(wrong, n)
        assert len(statuses) == 300
        assert statuses.count(401) == 5
        assert statuses.count(429) == 295


async def test_behind_a_trusted_proxy_one_persons_failures_leave_another_signing_in(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    async with serving(trusted_proxies="127.0.0.1") as edge:
        async with edge.client() as attacker, edge.client() as alice:
            by_attacker = {"X-Forwarded-For": "203.0.113.7"}
            seen = [
                (await edge.sign_in(attacker, f"guess-{n}", **by_attacker)).status for n in range(7)
            ]
            assert seen == [401] * 5 + [429] * 2
            # another person behind the same proxy: a wrong token of theirs is theirs alone...
            by_alice = {"X-Forwarded-For": "198.51.100.4, 203.0.113.9"}  # the left one: forged
            assert (await edge.sign_in(alice, "a-typo", **by_alice)).status == 401
            # ...and their right token signs in
            assert (await edge.sign_in(alice, TOKENS["alice"], **by_alice)).status == 200
            assert (await alice.get("/api/session")).status == 200
            assert (await alice.get("/static/app.js", headers=by_alice)).status == 200
            socket = await edge.socket(alice, **by_alice)  # the page's socket, through it too
            assert await new_tab(socket)
            await socket.close()
    assert "refused: wrong token" in caplog.text
    assert "dashboard sign-in from 203.0.113.7 refused" in caplog.text
    assert "from 203.0.113.9 refused" in caplog.text and "198.51.100.4" not in caplog.text


async def test_the_right_token_signs_in_from_a_shared_address_full_of_failures() -> None:
    async with serving() as edge:  # no trusted proxy: everyone here is 127.0.0.1
        async with edge.client() as others, edge.client() as bob:
            for n in range(20):
                assert (await edge.sign_in(others, f"guess-{n}")).status in (401, 429)
            assert (await edge.sign_in(others, "one-more")).status == 429
            assert (await edge.sign_in(bob, TOKENS["bob"])).status == 200


async def test_a_valid_token_of_someone_on_no_list_holds_that_user_not_the_address() -> None:
    async with serving(trusted_proxies="127.0.0.0/8") as edge:
        async with edge.client() as client:
            for n in range(5):
                forwarded = {"X-Forwarded-For": f"192.0.2.{n}"}
                assert (await edge.sign_in(client, TOKENS["mallory"], **forwarded)).status == 401
            elsewhere = {"X-Forwarded-For": "192.0.2.99"}
            assert (await edge.sign_in(client, TOKENS["mallory"], **elsewhere)).status == 429
            assert (await edge.sign_in(client, TOKENS["alice"], **elsewhere)).status == 200


async def test_x_forwarded_for_from_an_untrusted_peer_is_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    async with serving(trusted_proxies=["10.0.0.0/8"]) as edge:
        async with edge.client() as client:
            seen = []
            for n in range(6):  # a new forged address each time: all counted on the peer
                forged = {"X-Forwarded-For": f"198.51.100.{n}"}
                seen.append((await edge.sign_in(client, f"guess-{n}", **forged)).status)
            assert seen == [401] * 5 + [429]
    assert "198.51.100." not in caplog.text
    assert caplog.text.count("dashboard sign-in from 127.0.0.1 refused") == 6


# ---- sessions end, and their sockets with them ----------------------------------------------
async def test_signing_out_closes_the_sessions_sockets_at_once() -> None:
    async with serving() as edge, edge.client() as client:
        assert (await edge.sign_in(client, TOKENS["alice"])).status == 200
        first, second = await edge.socket(client), await edge.socket(client)
        csrf = (await (await client.get("/api/session")).json())["csrf"]
        out = await client.post(
            "/api/sign-out", headers={"Origin": edge.base, "X-CSRF-Token": csrf}
        )
        assert out.status == 200
        assert await closed_with(first) == SESSION_ENDED
        assert await closed_with(second) == SESSION_ENDED


async def test_a_session_that_expires_has_its_socket_closed() -> None:
    clock = FakeClock(1000.0)
    async with serving(clock) as edge, edge.client() as client, edge.client() as bob:
        assert (await edge.sign_in(client, TOKENS["alice"])).status == 200
        socket = await edge.socket(client)
        clock.now += 11 * 3600  # within the 12 hours: nothing happens
        assert (await edge.sign_in(bob, TOKENS["bob"])).status == 200
        bobs = await edge.socket(bob)  # bob's session is 11 h younger
        assert await new_tab(socket)  # still served
        clock.now += 2 * 3600
        assert await closed_with(socket) == SESSION_ENDED
        assert (await client.get("/api/session")).status == 401
        assert not bobs.closed and (await bob.get("/api/session")).status == 200
        await bobs.close()


async def test_a_new_sign_in_ends_the_old_session_its_cookie_and_its_sockets() -> None:
    async with serving() as edge, edge.client() as client:
        first = await edge.sign_in(client, TOKENS["alice"])
        old_cookie = first.cookies[COOKIE].value
        socket = await edge.socket(client)
        again = await edge.sign_in(client, TOKENS["alice"])
        assert again.status == 200
        assert again.cookies[COOKIE].value != old_cookie
        assert await closed_with(socket) == SESSION_ENDED
        assert (await client.get("/api/session")).status == 200  # the new cookie works
        async with edge.client() as replay:
            stale = await replay.get("/api/session", headers={"Cookie": f"{COOKIE}={old_cookie}"})
            assert stale.status == 401


# ---- the Host header ---------------------------------------------------------------------------
async def raw_exchange(port: int, request: bytes) -> bytes:
    """Send `request` on a fresh connection; everything the server sends until it closes."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(request)
        received = b""
        with anyio.fail_after(BOUND):
            while True:
                try:
                    received += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return received


def get(path: str, host: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()


async def test_a_foreign_host_is_refused_without_detail_and_the_probes_stay_open(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    async with serving() as edge:
        rebound = await raw_exchange(edge.port, get("/", f"attacker.example:{edge.port}"))
        head, _, body = rebound.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 421") and body == b""
        assert (await raw_exchange(edge.port, get("/api/session", "attacker.example"))).startswith(
            b"HTTP/1.1 421"
        )
        for host in (f"127.0.0.1:{edge.port}", "localhost", f"[::1]:{edge.port}"):
            assert (await raw_exchange(edge.port, get("/", host))).startswith(b"HTTP/1.1 200")
        probe = await raw_exchange(edge.port, get("/healthz", "10.1.2.3:8765"))
        assert probe.startswith(b"HTTP/1.1 200")
        no_host = await raw_exchange(edge.port, b"GET / HTTP/1.0\r\n\r\n")
        assert no_host.startswith(b"HTTP/1.0 400") or no_host.startswith(b"HTTP/1.1 400")
    assert caplog.text.count("'attacker.example") == 2  # once per host, not per request


async def test_the_allowed_hosts_setting_names_the_public_host_or_any() -> None:
    async with serving(allowed_hosts='["chat.example.com"]') as edge:
        named = await raw_exchange(edge.port, get("/", "chat.example.com"))
        assert named.startswith(b"HTTP/1.1 200")
        assert (await raw_exchange(edge.port, get("/", "127.0.0.1"))).startswith(b"HTTP/1.1 421")
    async with serving(allowed_hosts="*") as edge:
        assert (await raw_exchange(edge.port, get("/", "anything.example"))).startswith(
            b"HTTP/1.1 200"
        )


# ---- connections -------------------------------------------------------------------------------
async def test_a_half_sent_request_and_an_idle_connection_are_closed_by_the_header_timeout() -> (
    None
):
    async with serving(header_timeout=0.3) as edge:
        half = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "  # and then nothing more
        assert await raw_exchange(edge.port, half) == b""
        idle = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"  # kept alive, then nothing
        answered = await raw_exchange(edge.port, idle)
        assert answered.startswith(b"HTTP/1.1 200") and b'{"status": "ok"}' in answered


async def test_connections_past_the_per_address_cap_are_closed_at_once() -> None:
    async with serving(max_connections_per_address=3) as edge:
        held = [await anyio.connect_tcp("127.0.0.1", edge.port) for _ in range(3)]
        try:
            assert await raw_exchange(edge.port, get("/healthz", "127.0.0.1")) == b""
            await held[0].send(get("/healthz", "127.0.0.1"))
            with anyio.fail_after(BOUND):
                assert (await held[0].receive()).startswith(b"HTTP/1.1 200")
            await held[1].aclose()
            with anyio.fail_after(BOUND):  # one left: a new connection is admitted again
                while not (answer := await raw_exchange(edge.port, get("/healthz", "x"))):
                    await anyio.sleep(0.05)
            assert answer.startswith(b"HTTP/1.1 200")
        finally:
            for stream in held:
                await stream.aclose()


# ---- what a person's pages can make the dashboard keep -----------------------------------------
HOSTILE = "<" * (MAX_FRAME_TEXT - 1)  # the longest message a page may send: 64 kB once escaped


async def kept_after(tabs: int, rounds: int) -> dict[str, int]:
    """Alice's five pages send HOSTILE `rounds` times into each of `tabs` new tabs; then the
    bytes of HTML kept per tab: what a page that reconnects is sent."""
    async with serving() as edge, edge.client() as client:
        assert (await edge.sign_in(client, TOKENS["alice"])).status == 200
        pages = [await edge.socket(client) for _ in range(5)]
        opened = [await new_tab(pages[0]) for _ in range(tabs)]  # every page is told of each
        sent = [(n % len(pages), tab) for _ in range(rounds) for n, tab in enumerate(opened)]
        async with anyio.create_task_group() as reading:
            for page in pages:  # each page reads what it is sent, as a browser does
                reading.start_soon(_read_until_closed, page)
            for page_index, tab in sent:
                frame = {"type": "send", "tab": tab, "text": HOSTILE}
                await pages[page_index].send_json(frame)
            with anyio.fail_after(BOUND):
                while len(edge.received) < len(sent):
                    await anyio.sleep(0.02)
            for page in pages:
                await page.close()
        fresh = await edge.socket(client)
        await fresh.send_json({"type": "new_tab"})  # told after every kept message
        kept: dict[str, int] = {}
        with anyio.fail_after(BOUND):
            while (frame := await fresh.receive_json()).get("created") is not True:
                if frame["type"] == "message":
                    kept[frame["tab"]] = kept.get(frame["tab"], 0) + len(frame["html"].encode())
        await fresh.close()
    assert len(sent) * len(HOSTILE.encode()) * 4 > 1.2 * sum(kept.values())  # some were forgotten
    return kept


async def test_one_conversation_keeps_at_most_its_bytes_of_hostile_text() -> None:
    kept = await kept_after(tabs=1, rounds=20)
    assert CONVERSATION_BYTES - 2 * 65_000 < sum(kept.values()) <= CONVERSATION_BYTES


async def test_one_persons_pages_and_tabs_keep_at_most_the_persons_bytes() -> None:
    kept = await kept_after(tabs=15, rounds=6)
    assert len(kept) == 15
    assert PERSON_BYTES - 2 * 65_000 < sum(kept.values()) <= PERSON_BYTES  # full, never over
    assert max(kept.values()) <= CONVERSATION_BYTES


# ---- the settings --------------------------------------------------------------------------------
def test_the_edge_settings_read_lists_as_json_or_commas_and_name_a_bad_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SWITCHBOARD_HTTP__TRUSTED_PROXIES", '["10.0.0.0/8", "192.0.2.1"]')
    monkeypatch.setenv("SWITCHBOARD_HTTP__ALLOWED_HOSTS", "chat.example.com, chat.example.com:8443")
    http = load_settings().http
    assert http.trusted_proxies == ["10.0.0.0/8", "192.0.2.1"]
    assert http.allowed_hosts == ["chat.example.com", "chat.example.com:8443"]
    assert (http.header_timeout, http.max_connections_per_address) == (15.0, 32)
    monkeypatch.setenv("SWITCHBOARD_HTTP__TRUSTED_PROXIES", "10.0.0.0/8, proxy.example")
    with pytest.raises(ConfigError) as raised:
        load_settings()
    assert str(raised.value) == (
        "Invalid setting SWITCHBOARD_HTTP__TRUSTED_PROXIES: "
        "'proxy.example' is not an IP address or CIDR network"
    )


async def test_a_body_nested_past_the_parsers_depth_is_refused_not_a_server_error() -> None:
    deep = b"[" * 200_000
    async with serving() as edge, edge.client() as client:
        sign_in = await client.post(
            "/api/sign-in",
            data=deep,
            headers={"Origin": edge.base, "Content-Type": "application/json"},
        )
        assert sign_in.status in (400, 401, 413)
        assert (await edge.sign_in(client, TOKENS["alice"])).status == 200
        page = await edge.socket(client)
        await page.send_str("[" * 5_000)
        await new_tab(page)  # the socket still answers after the hostile frame
        await page.close()
