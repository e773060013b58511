"""What the HTTP server of `switchboard run` checks before any route runs (issue 21):

- **Host** (`SWITCHBOARD_HTTP__ALLOWED_HOSTS`): a request whose `Host` header is not on the list
  is answered 421 with an empty body, so a page on another name that resolves to this server (DNS
  rebinding) cannot reach the dashboard or /metrics. Empty list: the listen address, `localhost`,
  `127.0.0.1` and `[::1]`; `*` allows any host. An entry without a port matches that host on any
  port. The probes (`/healthz`, `/readyz`) answer whatever the Host: container and orchestrator
  probes ask by IP, and they show nothing a rebinding page could use. The platforms' webhooks
  (Telegram, Slack HTTP mode) are served by their own servers, not this one.
- **The client's address**: the TCP peer, unless the peer is in
  `SWITCHBOARD_HTTP__TRUSTED_PROXIES` (addresses or CIDR networks): then the right-most
  `X-Forwarded-For` address that is not itself a trusted proxy. Routes read it as
  `request.remote`.
- **Connections**: at most `SWITCHBOARD_HTTP__MAX_CONNECTIONS_PER_ADDRESS` open at once per
  TCP peer (a trusted proxy is not capped: it carries everyone); one more is closed as soon as
  it is accepted. How long a connection may take to send a request's line and headers is
  aiohttp's keep-alive timer (`HttpServer`), which also closes an idle keep-alive connection."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence

from aiohttp import hdrs, web
from aiohttp.typedefs import Middleware

from surfaces.bounded import BoundedMap

__all__ = ["PROBES", "ConnectionCap", "HostCheck", "TrustedProxies", "edge_middleware"]

log = logging.getLogger(__name__)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

PROBES = frozenset({"/healthz", "/readyz"})
LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")


def split_host(host: str) -> tuple[str, str]:
    """`name:port` -> (name, port); IPv6 literals keep their brackets; names lower-cased."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host.partition("]")
        return name + "]", rest.removeprefix(":")
    name, colon, port = host.rpartition(":")
    if colon and port.isdigit():
        return name.rstrip("."), port
    return host.rstrip("."), ""


class HostCheck:
    """The hosts a request may name: (name, port) pairs, "" for any port."""

    def __init__(self, allowed: Sequence[str], listen: str) -> None:
        entries = list(allowed) or [_bracketed(listen), *LOCAL_HOSTS]
        self.any_host = "*" in entries
        self._entries = [split_host(entry) for entry in entries if entry != "*"]
        self._explicit = bool(allowed)
        self._reported: BoundedMap[str, bool] = BoundedMap(1000)

    def allows(self, host: str | None) -> bool:
        if self.any_host:
            return True
        if not host:
            return False
        name, port = split_host(host)
        return any(name == n and (not p or p == port) for n, p in self._entries)

    def refused(self, host: str | None) -> None:
        """Logged once per host (a scanner's every request would drown the log)."""
        shown = repr(host)[:120]
        if shown in self._reported:
            log.debug("HTTP request refused: Host %s is not allowed", shown)
            return
        self._reported.remember(shown, True)
        log.warning(
            "HTTP request refused: Host %s is not in SWITCHBOARD_HTTP__ALLOWED_HOSTS%s",
            shown,
            "" if self._explicit else " (unset: the listen address and localhost)",
        )


def _bracketed(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


class TrustedProxies:
    def __init__(self, entries: Iterable[str]) -> None:
        self._networks: list[Network] = [ipaddress.ip_network(e, strict=False) for e in entries]

    def __bool__(self) -> bool:
        return bool(self._networks)

    def trusts(self, address: str | None) -> bool:
        if not address or not self._networks:
            return False
        try:
            ip = ipaddress.ip_address(address.strip("[]"))
        except ValueError:
            return False
        return any(ip in network for network in self._networks)

    def client_of(self, peer: str | None, forwarded_for: Sequence[str]) -> str | None:
        """The peer, or through trusted proxies the right-most forwarded address that is not one
        of them (the left-most, when every one is). A value that is not an address ends the walk:
        the hop that added it is the nearest one known."""
        if not self.trusts(peer):
            return peer
        client = peer
        hops = [part.strip() for value in forwarded_for for part in value.split(",")]
        for hop in reversed(hops):
            try:
                ipaddress.ip_address(hop)
            except ValueError:
                break
            client = hop
            if not self.trusts(hop):
                break
        return client


def edge_middleware(hosts: HostCheck, proxies: TrustedProxies) -> Middleware:
    @web.middleware
    async def edge(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in PROBES:
            host = request.headers.get(hdrs.HOST)
            if not hosts.allows(host):
                hosts.refused(host)
                return web.Response(status=421 if host else 400)
        if proxies:
            client = proxies.client_of(
                request.remote, request.headers.getall(hdrs.X_FORWARDED_FOR, [])
            )
            if client is not None and client != request.remote:
                request = request.clone(remote=client)
        return await handler(request)

    return edge


class ConnectionCap:
    """Open connections per TCP peer; past `limit`, a new one is closed as it is accepted."""

    def __init__(self, limit: int, proxies: TrustedProxies) -> None:
        self.limit = limit
        self._proxies = proxies
        self._open: dict[str, int] = {}

    def factory(self, make: Callable[[], asyncio.BaseProtocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: _Capped(self, make)

    def admit(self, peer: str) -> bool:
        if self._proxies.trusts(peer):
            return True
        count = self._open.get(peer, 0)
        if count >= self.limit:
            log.info("HTTP connection from %s closed: %d already open", peer, count)
            return False
        self._open[peer] = count + 1
        return True

    def release(self, peer: str) -> None:
        if self._proxies.trusts(peer):
            return
        count = self._open.get(peer, 0) - 1
        if count > 0:
            self._open[peer] = count
        else:
            self._open.pop(peer, None)


class _Capped(asyncio.Protocol):
    """aiohttp's protocol behind the cap: made only for an admitted connection; every event
    handed on as it comes."""

    def __init__(self, cap: ConnectionCap, make: Callable[[], asyncio.BaseProtocol]) -> None:
        self._cap = cap
        self._make = make
        self._inner: asyncio.Protocol | None = None
        self._peer = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peername = transport.get_extra_info("peername")
        self._peer = str(peername[0]) if isinstance(peername, tuple) and peername else ""
        if not self._cap.admit(self._peer):
            assert isinstance(transport, asyncio.Transport)
            transport.abort()
            return
        inner = self._make()
        assert isinstance(inner, asyncio.Protocol)
        self._inner = inner
        inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._inner is not None:
            self._cap.release(self._peer)
            self._inner.connection_lost(exc)
            self._inner = None

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()
