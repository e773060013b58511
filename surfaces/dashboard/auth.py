"""Who is signed in to the dashboard: access tokens checked against their digests, server-side
sessions, CSRF tokens and the Origin check (the sign-in limit: sign_in_limit.py).

Deny by default: without a session nothing but the page, its static files and the sign-in form
answer. A token is never stored or logged: `SWITCHBOARD_DASHBOARD__TOKENS` holds the SHA-256
digest of each user's token, and a presented token's digest is compared with every one of them
in constant time (`hmac.compare_digest`), so the time taken says nothing about which was close.

A session is a random id in an HttpOnly, SameSite=Strict cookie (Secure when the request came
over HTTPS, or through a proxy that says `X-Forwarded-Proto: https`); the sessions live in this
process only (a restart signs everyone out), bounded in number and expiring; a new sign-in from
a browser ends the session its cookie held (the page's sockets of that session are closed by the
surface, as at sign-out and expiry). Each carries a CSRF
token every state change must present (the `X-CSRF-Token` header, or the WebSocket's `csrf`
query parameter), and every state change must come from this host's own Origin."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from aiohttp import web

from surfaces.bounded import BoundedMap

__all__ = [
    "COOKIE",
    "CSRF_HEADER",
    "Session",
    "SessionBook",
    "TokenBook",
    "digest_of",
    "is_https",
    "same_origin",
]

COOKIE = "switchboard_session"
CSRF_HEADER = "X-CSRF-Token"
MAX_TOKEN_CHARS = 256


def digest_of(token: str) -> str:
    """The SHA-256 hex digest `SWITCHBOARD_DASHBOARD__TOKENS` holds for `token`."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class TokenBook:
    """User id -> the digest of their token."""

    def __init__(self, digests: Mapping[str, str]) -> None:
        self._digests = {user: digest.lower() for user, digest in digests.items()}

    def user_for(self, token: str) -> str | None:
        """The user whose token this is, or None. Every digest is compared, whatever matches."""
        if not token or len(token) > MAX_TOKEN_CHARS:
            return None
        presented = digest_of(token).encode()
        found = None
        for user, digest in self._digests.items():
            if hmac.compare_digest(presented, digest.encode()):
                found = user
        return found


@dataclass(slots=True)
class Session:
    id: str
    user: str
    csrf: str
    expires: float


@dataclass(slots=True)
class SessionBook:
    """Sessions by id: at most `limit` (the oldest signed out first), each for `lifetime` s."""

    lifetime: float
    limit: int = 1000
    clock: Callable[[], float] = time.monotonic
    _sessions: BoundedMap[str, Session] = field(init=False)

    def __post_init__(self) -> None:
        self._sessions = BoundedMap(self.limit)

    def open(self, user: str) -> Session:
        session = Session(
            secrets.token_urlsafe(32), user, secrets.token_urlsafe(24), self.clock() + self.lifetime
        )
        self._sessions.remember(session.id, session)
        return session

    def find(self, session_id: str | None) -> Session | None:
        if not session_id or len(session_id) > 128:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        if session.expires <= self.clock():
            del self._sessions[session_id]
            return None
        return session

    def close(self, session_id: str) -> Session | None:
        return self._sessions.pop(session_id, None)

    def of(self, request: web.Request) -> Session | None:
        return self.find(request.cookies.get(COOKIE))


def csrf_ok(session: Session, presented: str | None) -> bool:
    return bool(presented) and hmac.compare_digest(session.csrf.encode(), str(presented).encode())


def is_https(request: web.Request) -> bool:
    forwarded = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    return request.secure or forwarded == "https"


def same_origin(request: web.Request) -> bool:
    """The request's Origin is this host (scheme and host:port as the request reached us)."""
    origin = request.headers.get("Origin")
    if not origin:
        return False
    scheme = "https" if is_https(request) else "http"
    return hmac.compare_digest(origin.rstrip("/").lower(), f"{scheme}://{request.host}".lower())
