"""The dashboard's HTTP routes: the page, its static files, sign-in and sign-out, the session
probe and the WebSocket, mounted by `DashboardSurface.add_routes` on the server of `switchboard
run` (bot/http_server.py) or on any aiohttp Application (the tests).

Every response carries a strict Content-Security-Policy: scripts and styles only from this
origin's static files (the page has no inline script or style), images only from here or data:
URLs, no frames, no plugins, and nothing but this origin to connect to."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any, Protocol

import anyio
from aiohttp import WSMsgType, web
from aiohttp.helpers import content_disposition_header

from surfaces.base import OutgoingFile
from surfaces.dashboard.auth import (
    COOKIE,
    CSRF_HEADER,
    MAX_TOKEN_CHARS,
    Session,
    SessionBook,
    TokenBook,
    csrf_ok,
    is_https,
    same_origin,
)
from surfaces.dashboard.errors import (
    BAD_FRAME,
    NOT_ADMIN,
    NOT_READY,
    SIGNED_OUT,
    TOO_MANY,
    WRONG_TOKEN,
)
from surfaces.dashboard.sign_in_limit import Outcome, SignInLimiter

__all__ = ["CSP", "OpsAct", "OpsSnapshot", "Site", "mount"]

log = logging.getLogger(__name__)

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
# The only files served from static/, with their types: nothing else can be asked for by name.
_STATIC = {"app.js": "text/javascript", "app.css": "text/css"}
MAX_SOCKET_FRAME = 64 * 1024
BODY_TIMEOUT = 10.0  # s a sign-in's small body may take to arrive


# The operations view's two callables, handed over by the bot (`set_operations`): the snapshot
# (plain JSON-able data) and an action (actor, action, target) -> the sentence to show.
OpsSnapshot = Callable[[], Awaitable[dict[str, Any]]]
OpsAct = Callable[[str, str, str], Awaitable[str]]


class Site(Protocol):
    """What the routes need of the dashboard (its adapter): declared here so that this module
    does not import the adapter that mounts it."""

    sessions: SessionBook
    tokens: TokenBook
    limiter: SignInLimiter
    ops_snapshot: OpsSnapshot | None
    ops_act: OpsAct | None

    def is_admin(self, user: str) -> bool: ...

    def may_sign_in(self, user: str) -> bool: ...

    async def end_session(self, session_id: str, reason: str) -> None: ...

    async def connected(self, session: Session, socket: web.WebSocketResponse) -> None: ...

    def disconnected(self, session: Session, socket: web.WebSocketResponse) -> None: ...

    async def received(self, session: Session, data: object) -> None: ...

    def file_of(self, user: str, file_id: str) -> OutgoingFile | None: ...


def _static_text(name: str) -> str:
    return resources.files("surfaces.dashboard").joinpath("static", name).read_text("utf-8")


def _refuse(status: int, sentence: str) -> web.Response:
    return web.json_response({"error": sentence}, status=status, headers=_HEADERS)


def _address(request: web.Request) -> str:
    return request.remote or "unknown"


def mount(app: web.Application, surface: Site) -> None:
    """The dashboard's routes on `app` (before it starts)."""
    page = _static_text("index.html")
    static = {name: _static_text(name) for name in _STATIC}
    sessions = surface.sessions

    async def index(request: web.Request) -> web.Response:
        return web.Response(text=page, content_type="text/html", headers=_HEADERS)

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in _STATIC:
            raise web.HTTPNotFound(headers=_HEADERS)
        return web.Response(text=static[name], content_type=_STATIC[name], headers=_HEADERS)

    async def session_probe(request: web.Request) -> web.Response:
        session = sessions.of(request)
        if session is None:
            return _refuse(401, SIGNED_OUT)
        return web.json_response(
            {"user": session.user, "csrf": session.csrf, "admin": surface.is_admin(session.user)},
            headers=_HEADERS,
        )

    def admin_session(request: web.Request, *, change: bool) -> Session | web.Response:
        """The admin's session of an operations request, or the refusal: signed in, the CSRF
        token on every request (also reads), Origin on a change, and the admin role."""
        session = sessions.of(request)
        if session is None:
            return _refuse(401, SIGNED_OUT)
        if (change and not same_origin(request)) or not csrf_ok(
            session, request.headers.get(CSRF_HEADER)
        ):
            log.warning(
                "dashboard operations request from %s refused: CSRF check", _address(request)
            )
            return _refuse(403, NOT_ADMIN)
        if not surface.is_admin(session.user):
            log.warning("dashboard operations refused to %r: not an admin", session.user)
            return _refuse(403, NOT_ADMIN)
        return session

    async def ops_snapshot(request: web.Request) -> web.Response:
        checked = admin_session(request, change=False)
        if isinstance(checked, web.Response):
            return checked
        if surface.ops_snapshot is None:
            return _refuse(503, NOT_READY)
        return web.json_response(await surface.ops_snapshot(), headers=_HEADERS)

    async def ops_action(request: web.Request) -> web.Response:
        checked = admin_session(request, change=True)
        if isinstance(checked, web.Response):
            return checked
        if surface.ops_act is None:
            return _refuse(503, NOT_READY)
        try:
            body: Any = await request.json()
        except (ValueError, RecursionError):  # a body nested past the parser's depth, too
            body = None
        action = body.get("action") if isinstance(body, dict) else None
        target = body.get("target") if isinstance(body, dict) else None
        if not isinstance(action, str) or not isinstance(target, str) or len(target) > 300:
            return _refuse(400, BAD_FRAME)
        said = await surface.ops_act(checked.user, action, target)
        return web.json_response({"said": said}, headers=_HEADERS)

    async def sign_in(request: web.Request) -> web.Response:
        address = _address(request)
        if not same_origin(request):
            log.warning("dashboard sign-in from %s refused: not from this page's origin", address)
            return _refuse(403, WRONG_TOKEN)
        token = await _presented_token(request)
        # counted and decided in one step, nothing awaited: see sign_in_limit.py
        verdict = surface.limiter.attempt(address, token, check_token)
        if verdict.outcome is not Outcome.SIGNED_IN or verdict.user is None:
            # never the token: only where it came from and whose it was, if anyone's
            whose = f" (user {verdict.user!r})" if verdict.user is not None else ""
            log.warning(
                "dashboard sign-in from %s refused: %s%s", address, verdict.outcome.value, whose
            )
            if verdict.outcome is Outcome.HELD:
                return _refuse(429, TOO_MANY)
            return _refuse(401, WRONG_TOKEN)
        user = verdict.user
        earlier = sessions.of(request)
        if earlier is not None:  # this browser's session is replaced, never kept beside it
            await surface.end_session(earlier.id, "signed in again")
        session = sessions.open(user)
        log.info("dashboard sign-in: user %r from %s", user, address)
        response = web.json_response({"user": user, "csrf": session.csrf}, headers=_HEADERS)
        response.set_cookie(
            COOKIE,
            session.id,
            httponly=True,
            samesite="Strict",
            secure=is_https(request),
            path="/",
            max_age=int(sessions.lifetime),
        )
        return response

    def check_token(token: str) -> tuple[str | None, bool]:
        user = surface.tokens.user_for(token)
        return user, user is not None and surface.may_sign_in(user)

    async def sign_out(request: web.Request) -> web.Response:
        session = sessions.of(request)
        if session is None:
            return _refuse(401, SIGNED_OUT)
        if not same_origin(request) or not csrf_ok(session, request.headers.get(CSRF_HEADER)):
            log.warning("dashboard sign-out from %s refused: CSRF check", _address(request))
            return _refuse(403, SIGNED_OUT)
        await surface.end_session(session.id, "signed out")
        response = web.json_response({"signed_out": True}, headers=_HEADERS)
        response.del_cookie(COOKIE, path="/")
        return response

    async def socket(request: web.Request) -> web.StreamResponse:
        session = sessions.of(request)
        if not same_origin(request):
            log.warning("dashboard socket from %s refused: foreign Origin", _address(request))
            return _refuse(403, SIGNED_OUT)
        if session is None:
            return _refuse(401, SIGNED_OUT)
        if not csrf_ok(session, request.query.get("csrf")):
            log.warning("dashboard socket from %s refused: CSRF check", _address(request))
            return _refuse(403, SIGNED_OUT)
        ws = web.WebSocketResponse(heartbeat=30.0, max_msg_size=MAX_SOCKET_FRAME)
        await ws.prepare(request)
        await surface.connected(session, ws)
        try:
            async for message in ws:
                if message.type != WSMsgType.TEXT:
                    continue
                if sessions.find(session.id) is None:  # expired or signed out meanwhile
                    break
                await surface.received(session, _decoded(message.data))
        finally:
            surface.disconnected(session, ws)
        return ws

    async def download(request: web.Request) -> web.Response:
        """A file the bot sent, to a person who sees its conversation (else 404, as for an id
        that was never given or is forgotten)."""
        session = sessions.of(request)
        if session is None:
            return _refuse(401, SIGNED_OUT)
        file = surface.file_of(session.user, request.match_info["id"])
        if file is None:
            raise web.HTTPNotFound(headers=_HEADERS)
        disposition = content_disposition_header("attachment", filename=file.name)
        return web.Response(
            body=file.data,
            content_type="application/octet-stream",  # never rendered by the browser
            headers={**_HEADERS, "Content-Disposition": disposition},
        )

    app.router.add_get("/", index)
    app.router.add_get("/static/{name}", asset)
    app.router.add_get("/api/session", session_probe)
    app.router.add_post("/api/sign-in", sign_in)
    app.router.add_post("/api/sign-out", sign_out)
    app.router.add_get("/ws", socket)
    app.router.add_get("/api/files/{id}", download)
    app.router.add_get("/api/ops", ops_snapshot)
    app.router.add_post("/api/ops/action", ops_action)


async def _presented_token(request: web.Request) -> str:
    """The token of a sign-in (JSON `{"token": ...}` or a form field), "" when there is none or
    the body does not arrive within BODY_TIMEOUT (a body sent a byte at a time)."""
    if request.content_length is not None and request.content_length > 4 * MAX_TOKEN_CHARS:
        return ""
    token: object = ""
    try:
        with anyio.move_on_after(BODY_TIMEOUT):
            if request.content_type == "application/json":
                body: Any = await request.json()
                token = body.get("token", "") if isinstance(body, dict) else ""
            else:
                token = (await request.post()).get("token", "")
    except (ValueError, UnicodeDecodeError, RecursionError):
        return ""
    return token.strip() if isinstance(token, str) else ""


def _decoded(data: str) -> object:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None
