"""A fake Slack on 127.0.0.1 for the real slack_sdk / slack-bolt: the Web API methods the Slack
surface uses, Socket Mode's websocket, and a client that posts signed Events API and interactivity
requests to an app in HTTP mode.

Web API (`POST /api/<method>`, JSON or form-encoded, the token in `Authorization: Bearer` or a
`token` field; answers `{"ok": …}` with HTTP 200, 429 + `Retry-After` when rate limited):
`auth.test`, `apps.connections.open` (app token; answers a `ws://` URL on this server),
`chat.postMessage`, `chat.update`, `chat.postEphemeral`, and the native streams `chat.startStream`
/ `chat.appendStream` / `chat.stopStream`, which take the text either as `markdown_text` (slack_sdk
3.37) or as `chunks: [{"type": "markdown_text", "text": …}]` (3.47+). Streams are thread replies,
name their recipient outside DMs, end after `stream_lifetime` seconds
(`message_not_in_streaming_state`) and refuse more than `stream_limit` characters (`msg_too_long`).
Any other method is `unknown_method`, and so are the stream methods when `streaming=False`.

Failure injection: `fail_next(method, times, retry_after=…)` answers the next calls of a method
with 429 (or another error); `rate_interval` enforces one write call per channel per that many
seconds (a second one within the interval is answered 429), as Slack limits posting per channel.
Every call is recorded (`calls`), with its status and the time it arrived (`time.perf_counter`).

Socket Mode (`GET /socket`): sends `hello`, then whatever `push()` sends as envelopes
(`events_api`, `interactive`) with `envelope_id` and `retry_attempt`; records the acks;
`disconnect()` asks the client to reconnect
(`{"type": "disconnect", "reason": "refresh_requested"}`); `reset_connection()` drops the newest
connection with a TCP reset, as a network fault does; `refuse_sockets(n)` answers the next n
connection attempts 503.

Files and App Home (issue 13): tests store a file with `add_file` (its bytes, mime type, and a
`mode` such as `hidden_by_limit`), put the object it returns on a `file_share` event, and the
bot fetches it with `files.info` and a GET of its `url_private_download` on this server
(`/files-pri/...`, the bot token required in `Authorization: Bearer`, else 403; every fetch is in
`downloads`). Uploads run file upload v2: `files.getUploadURLExternal` (refused with
`file_too_large` past `upload_limit`, 1 GB like Slack), the POST of the bytes to the URL it
answers, `files.completeUploadExternal` (channel, thread, title, comment) -> `uploads`.
`views.publish` records the newest view per user (`views`); `home_opened(user)` is the event
Slack sends when someone opens the app's Home tab.

Blocks are checked as Block Kit documents its buttons (`check_blocks`, `invalid_blocks`
otherwise): a `plain_text` label of 1-75 characters, an `action_id` of at most 255, a `value` of at
most 2,000, a `url` of 1-3,000 characters, a `style` of `primary` or `danger`, at most 25 elements
per actions block. A link button (one with a `url`) opens its page, and Slack still sends the
app a `block_actions` payload for the click (`button_press(..., url=...)`), without a value
unless the button had one.

Builders for the payloads people cause (`dm`, `channel_message`, `mention`, `envelope`,
`button_press`, `file_share`, `home_opened`) and `SignedPoster`, which posts them to an HTTP-mode app signed as Slack does
(`X-Slack-Signature: v0=HMAC-SHA256(secret, "v0:<timestamp>:<body>")`), or signed wrongly."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import math
import socket
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import aiohttp
import anyio
from aiohttp import web

from tests.fakes.loopback import LoopbackServer

BOT_TOKEN = "xoxb-1000000001-fakebottoken"
APP_TOKEN = "xapp-1-A0FAKEAPP-fakeapptoken"
SIGNING_SECRET = "fake-signing-secret"
TEAM_ID = "T0FAKETEAM"
APP_ID = "A0FAKEAPP"
BOT_USER_ID = "U0FAKEBOT"
BOT_ID = "B0FAKEBOT"

STREAM_METHODS = ("chat.startStream", "chat.appendStream", "chat.stopStream")
WRITE_METHODS = (
    "chat.postMessage",
    "chat.update",
    "chat.postEphemeral",
    *STREAM_METHODS,
)
_ZWSP = "\u200b"
LIVE_BLOCK_ID = "switchboard-choice-live"  # the adapter's buttons on a reply (Stop)
UPLOAD_LIMIT = 1_000_000_000  # Slack takes files up to 1 GB


@dataclass
class StoredFile:
    """A file a person shared, as Slack keeps it."""

    id: str
    name: str
    mimetype: str
    data: bytes = field(repr=False)
    mode: str = "hosted"  # hidden_by_limit | tombstone | external | hosted
    size: int | None = None  # what Slack claims (default: the real size)
    url: str = ""  # url_private_download, when the test wants another one
    chunked: bool = False  # served without a Content-Length, as a stream


@dataclass
class Upload:
    """A file the bot uploaded and shared."""

    channel: str
    thread_ts: str
    name: str
    title: str
    data: bytes = field(repr=False)
    comment: str = ""


@dataclass
class ApiCall:
    method: str
    params: dict[str, Any]
    status: int = 200
    error: str = ""  # the `error` of an `ok: false` answer
    at: float = field(default_factory=time.perf_counter)

    @property
    def channel(self) -> str:
        return str(self.params.get("channel") or "")

    @property
    def ok(self) -> bool:
        return self.status == 200 and not self.error


@dataclass
class Message:
    """A message the bot posted (or streamed)."""

    channel: str
    ts: str
    thread_ts: str  # "" at the top level
    text: str
    blocks: list[dict[str, Any]] = field(default_factory=list)
    streaming: bool = False
    stream_started: float = 0.0
    updates: int = 0

    @property
    def visible(self) -> str:
        """What a person reads (zero-width spaces are invisible)."""
        return self.text.replace(_ZWSP, "")

    @property
    def is_prompt(self) -> bool:
        """An approval prompt (open or closed), not a reply: blocks, and no reply buttons."""
        live = any(block.get("block_id") == LIVE_BLOCK_ID for block in self.blocks)
        return bool(self.blocks) and not live

    @property
    def buttons(self) -> list[dict[str, Any]]:
        return [
            element
            for block in self.blocks
            if block.get("type") == "actions"
            for element in block.get("elements", [])
        ]


@dataclass
class Ephemeral:
    channel: str
    user: str
    text: str
    thread_ts: str


@dataclass
class _Failure:
    status: int
    error: str
    retry_after: float


class FakeSlack(LoopbackServer):
    def __init__(
        self,
        *,
        streaming: bool = True,
        rate_interval: float | None = None,
        stream_lifetime: float = 300.0,
        stream_limit: int = 12_000,
        upload_limit: int = UPLOAD_LIMIT,
    ) -> None:
        super().__init__()
        self.streaming = streaming
        self.rate_interval = rate_interval
        self.stream_lifetime = stream_lifetime
        self.stream_limit = stream_limit
        self.calls: list[ApiCall] = []
        self.messages: dict[str, Message] = {}  # ts -> message, in the order posted
        self.ephemerals: list[Ephemeral] = []
        self.acks: list[dict[str, Any]] = []
        self.missing_channels: set[str] = set()
        self.files: dict[str, StoredFile] = {}
        self.downloads: list[tuple[str, str]] = []  # (file id, the token it came with)
        self.upload_limit = upload_limit
        self.uploads: list[Upload] = []
        self._pending_uploads: dict[str, dict[str, Any]] = {}
        self.views: dict[str, dict[str, Any]] = {}  # user -> the newest Home view published
        self._failures: dict[str, list[_Failure]] = {}
        self._last_write: dict[str, float] = {}
        self._ts = itertools.count(1)
        self._sockets: list[web.WebSocketResponse] = []
        self._socket_transports: dict[web.WebSocketResponse, Any] = {}
        self.connections = 0
        self.refused = 0  # Socket Mode connection attempts answered 503
        self._refused_sockets = 0

    # ---- lifecycle ---------------------------------------------------------------------------
    def _routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/socket", self._socket)
        app.router.add_get("/files-pri/{file}/{name}", self._download)
        app.router.add_post("/upload/v1/{file}", self._upload)

    async def _before_close(self) -> None:
        for ws in list(self._sockets):
            await ws.close()

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    # ---- injection -----------------------------------------------------------------------------
    def fail_next(
        self,
        method: str,
        times: int = 1,
        *,
        retry_after: float = 1.0,
        error: str = "ratelimited",
        status: int = 429,
    ) -> None:
        """The next `times` calls of `method` fail: 429 with Retry-After by default, or
        `{"ok": false, "error": error}` with `status`."""
        self._failures.setdefault(method, []).extend([_Failure(status, error, retry_after)] * times)

    def next_ts(self) -> str:
        """A fresh message timestamp (for messages people send, too)."""
        n = next(self._ts)
        return f"{1_700_000_000 + n // 1_000_000}.{n % 1_000_000:06d}"

    # ---- what happened -------------------------------------------------------------------------
    def calls_to(self, method: str | None = None, channel: str | None = None) -> list[ApiCall]:
        return [
            call
            for call in self.calls
            if (method is None or call.method == method)
            and (channel is None or call.channel == channel)
        ]

    def in_thread(self, channel: str, thread_ts: str = "") -> list[Message]:
        """The bot's messages in a thread (or at the top level of a channel, for "")."""
        return [
            m for m in self.messages.values() if m.channel == channel and m.thread_ts == thread_ts
        ]

    def replies(self, channel: str, thread_ts: str = "") -> list[Message]:
        """The bot's messages in a thread, without approval prompts."""
        return [m for m in self.in_thread(channel, thread_ts) if not m.is_prompt]

    def thread_text(self, channel: str, thread_ts: str = "") -> str:
        return "\n".join(m.visible for m in self.replies(channel, thread_ts))

    def streaming_now(self) -> list[Message]:
        return [m for m in self.messages.values() if m.streaming]

    # ---- the Web API ---------------------------------------------------------------------------
    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params: dict[str, Any] = dict(request.query)
        if request.content_type == "application/json":
            body = await request.json()
            if isinstance(body, dict):
                params.update(body)
        elif request.can_read_body:
            params.update(await request.post())
        token = params.pop("token", "") or request.headers.get("Authorization", "").removeprefix(
            "Bearer "
        )
        call = ApiCall(method, params)
        self.calls.append(call)
        failures = self._failures.get(method)
        if failures:
            failure = failures.pop(0)
            return self._fail(call, failure.error, failure.status, failure.retry_after)
        if method in WRITE_METHODS and self.rate_interval and call.channel:
            last = self._last_write.get(call.channel)
            if last is not None and call.at - last < self.rate_interval:
                wait = math.ceil(self.rate_interval - (call.at - last))
                return self._fail(call, "ratelimited", 429, max(1, wait))
            self._last_write[call.channel] = call.at
        handler = getattr(self, "_" + method.replace(".", "_"), None)
        if handler is None or (method in STREAM_METHODS and not self.streaming):
            return self._fail(call, "unknown_method")
        wanted = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
        if token != wanted:
            return self._fail(call, "invalid_auth")
        try:
            result = handler(params)
        except _ApiError as exc:
            return self._fail(call, exc.error)
        return web.json_response({"ok": True, **result})

    def _fail(
        self, call: ApiCall, error: str, status: int = 200, retry_after: float = 0
    ) -> web.Response:
        call.status, call.error = status, error
        headers = {"Retry-After": str(math.ceil(retry_after))} if status == 429 else {}
        return web.json_response({"ok": False, "error": error}, status=status, headers=headers)

    def _auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": "https://fake.slack.test/",
            "team": "Fake Team",
            "user": "switchboard",
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }

    def _apps_connections_open(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"url": f"ws://127.0.0.1:{self.port}/socket?ticket={uuid.uuid4().hex}"}

    def _channel(self, params: dict[str, Any]) -> str:
        channel = str(params.get("channel") or "")
        if not channel or channel in self.missing_channels:
            raise _ApiError("channel_not_found")
        return channel

    def _message(self, params: dict[str, Any]) -> Message:
        self._channel(params)
        message = self.messages.get(str(params.get("ts") or ""))
        if message is None or message.channel != params.get("channel"):
            raise _ApiError("message_not_found")
        return message

    def _chat_postMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(params)
        text, blocks = str(params.get("text") or ""), check_blocks(params.get("blocks"))
        if not text and not blocks:
            raise _ApiError("no_text")
        ts = self.next_ts()
        thread = str(params.get("thread_ts") or "")
        self.messages[ts] = Message(channel, ts, thread, text, blocks)
        return {"channel": channel, "ts": ts, "message": {"text": text, "ts": ts}}

    def _chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        message = self._message(params)
        if message.streaming:
            raise _ApiError("message_is_streaming")  # the fake's own: stop a stream first
        if "text" in params:
            message.text = str(params["text"])
        if "blocks" in params:
            message.blocks = check_blocks(params["blocks"])
        message.updates += 1
        return {"channel": message.channel, "ts": message.ts, "text": message.text}

    def _chat_postEphemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(params)
        user = str(params.get("user") or "")
        if not user:
            raise _ApiError("user_not_found")
        thread = str(params.get("thread_ts") or "")
        self.ephemerals.append(Ephemeral(channel, user, str(params.get("text") or ""), thread))
        return {"message_ts": self.next_ts()}

    def _chat_startStream(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(params)
        thread = str(params.get("thread_ts") or "")
        if not thread:
            raise _ApiError("invalid_arguments")  # streams are always thread replies
        named = params.get("recipient_user_id") and params.get("recipient_team_id")
        if not channel.startswith("D") and not named:
            raise _ApiError("invalid_arguments")  # outside DMs the recipient is required
        text = _stream_text(params)
        if len(text) > self.stream_limit:
            raise _ApiError("msg_too_long")
        ts = self.next_ts()
        self.messages[ts] = Message(
            channel, ts, thread, text, streaming=True, stream_started=time.perf_counter()
        )
        return {"channel": channel, "ts": ts}

    def _live_stream(self, params: dict[str, Any]) -> Message:
        message = self._message(params)
        if (
            message.streaming
            and time.perf_counter() - message.stream_started > self.stream_lifetime
        ):
            message.streaming = False  # Slack ended it; what was not yet shown is lost
        if not message.streaming:
            raise _ApiError("message_not_in_streaming_state")
        return message

    def _chat_appendStream(self, params: dict[str, Any]) -> dict[str, Any]:
        message = self._live_stream(params)
        text = _stream_text(params)
        if len(message.text) + len(text) > self.stream_limit:
            raise _ApiError("msg_too_long")
        message.text += text
        return {"channel": message.channel, "ts": message.ts}

    def _chat_stopStream(self, params: dict[str, Any]) -> dict[str, Any]:
        message = self._live_stream(params)
        text = _stream_text(params)
        if len(message.text) + len(text) > self.stream_limit:
            message.streaming = False
            raise _ApiError("msg_too_long")
        message.text += text
        if "blocks" in params:
            message.blocks = check_blocks(params["blocks"])
        message.streaming = False
        return {"channel": message.channel, "ts": message.ts, "message": {"text": message.text}}

    # ---- files and App Home ----------------------------------------------------------------------
    def add_file(
        self, name: str, mimetype: str, data: bytes, *, mode: str = "hosted", **extra: Any
    ) -> dict[str, Any]:
        """Store a file a person shares; returns its object for a `file_share` event."""
        file = StoredFile("F" + uuid.uuid4().hex[:10].upper(), name, mimetype, data, mode, **extra)
        self.files[file.id] = file
        return self._file_object(file)

    def _file_object(self, file: StoredFile) -> dict[str, Any]:
        url = file.url or f"http://127.0.0.1:{self.port}/files-pri/{TEAM_ID}-{file.id}/{file.name}"
        body: dict[str, Any] = {
            "id": file.id,
            "name": file.name,
            "title": file.name,
            "mimetype": file.mimetype,
            "size": len(file.data) if file.size is None else file.size,
            "mode": file.mode,
            "is_external": file.mode == "external",
        }
        if file.mode == "hosted":
            body["url_private"] = body["url_private_download"] = url
        return body

    def _files_info(self, params: dict[str, Any]) -> dict[str, Any]:
        file = self.files.get(str(params.get("file") or ""))
        if file is None:
            raise _ApiError("file_not_found")
        return {"file": self._file_object(file)}

    async def _download(self, request: web.Request) -> web.StreamResponse:
        file_id = request.match_info["file"].removeprefix(f"{TEAM_ID}-")
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        self.downloads.append((file_id, token))
        file = self.files.get(file_id)
        if token != BOT_TOKEN:
            return web.Response(status=403, text="sign in")
        if file is None or file.mode != "hosted":
            return web.Response(status=404)
        if not file.chunked:
            return web.Response(body=file.data, content_type=file.mimetype)
        response = web.StreamResponse(headers={"Content-Type": file.mimetype})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(file.data), 1024):
            await response.write(file.data[start : start + 1024])
        await response.write_eof()
        return response

    def _files_getUploadURLExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        name, length = str(params.get("filename") or ""), int(params.get("length") or -1)
        if not name or length < 0:
            raise _ApiError("invalid_arguments")
        if length > self.upload_limit:
            raise _ApiError("file_too_large")
        file_id = "F" + uuid.uuid4().hex[:10].upper()
        self._pending_uploads[file_id] = {"name": name, "length": length, "data": None}
        return {
            "upload_url": f"http://127.0.0.1:{self.port}/upload/v1/{file_id}",
            "file_id": file_id,
        }

    async def _upload(self, request: web.Request) -> web.Response:
        pending = self._pending_uploads.get(request.match_info["file"])
        if pending is None:
            return web.Response(status=404)
        data = await request.content.read()
        if len(data) != pending["length"] or len(data) > self.upload_limit:
            return web.Response(status=413, text="length mismatch or too large")
        pending["data"] = data
        return web.Response(text="OK - " + str(len(data)))

    def _files_completeUploadExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel_id") or "")
        if channel and channel in self.missing_channels:
            raise _ApiError("channel_not_found")
        done = []
        for item in _json_list(params.get("files")):
            pending = self._pending_uploads.pop(str(item.get("id") or ""), None)
            if pending is None or pending["data"] is None:
                raise _ApiError("file_not_found")  # never uploaded
            self.uploads.append(
                Upload(
                    channel,
                    str(params.get("thread_ts") or ""),
                    pending["name"],
                    str(item.get("title") or ""),
                    pending["data"],
                    str(params.get("initial_comment") or ""),
                )
            )
            done.append({"id": item["id"], "name": pending["name"], "title": item.get("title")})
        return {"files": done}

    def _views_publish(self, params: dict[str, Any]) -> dict[str, Any]:
        user, view = str(params.get("user_id") or ""), params.get("view")
        if isinstance(view, str):
            view = json.loads(view)
        if not user or not isinstance(view, dict) or view.get("type") != "home":
            raise _ApiError("invalid_arguments")
        self.views[user] = view
        return {"view": {"id": "V" + uuid.uuid4().hex[:8].upper(), **view}}

    # ---- Socket Mode ---------------------------------------------------------------------------
    def refuse_sockets(self, count: int = 1) -> None:
        """The next `count` Socket Mode connection attempts are answered 503."""
        self._refused_sockets += count

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        if self._refused_sockets > 0:
            self._refused_sockets -= 1
            self.refused += 1
            return web.Response(status=503)
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._sockets.append(ws)
        assert request.transport is not None
        self._socket_transports[ws] = request.transport
        self.connections += 1
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": len(self._sockets),
                "debug_info": {"host": "fake-slack", "approximate_connection_time": 18060},
                "connection_info": {"app_id": APP_ID},
            }
        )
        try:
            async for frame in ws:
                if frame.type == aiohttp.WSMsgType.TEXT:
                    data = json.loads(frame.data)
                    if isinstance(data, dict) and "envelope_id" in data:
                        self.acks.append(data)
        finally:
            if ws in self._sockets:
                self._sockets.remove(ws)
            self._socket_transports.pop(ws, None)
        return ws

    async def wait_connected(self, connections: int = 1, timeout: float = 10.0) -> None:
        with anyio.fail_after(timeout):
            while self.connections < connections or not self._sockets:
                await anyio.sleep(0.01)

    async def push(
        self,
        kind: str,
        payload: dict[str, Any],
        *,
        retry_attempt: int = 0,
        retry_reason: str = "",
        envelope_id: str = "",
    ) -> str:
        """Send one envelope on the newest connection; returns its id."""
        await self.wait_connected()
        envelope_id = envelope_id or uuid.uuid4().hex
        await self._sockets[-1].send_json(
            {
                "envelope_id": envelope_id,
                "type": kind,
                "accepts_response_payload": kind != "events_api",
                "retry_attempt": retry_attempt,
                "retry_reason": retry_reason,
                "payload": payload,
            }
        )
        return envelope_id

    def acked(self, envelope_id: str) -> bool:
        return any(ack.get("envelope_id") == envelope_id for ack in self.acks)

    async def reset_connection(self) -> None:
        """Drop the newest Socket Mode connection without a close frame (RST, linger 0)."""
        await self.wait_connected()
        transport = self._socket_transports[self._sockets[-1]]
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()

    async def disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask the client to reconnect, as Slack does every few hours."""
        await self.wait_connected()
        await self._sockets[-1].send_json(
            {"type": "disconnect", "reason": reason, "debug_info": {"host": "fake-slack"}}
        )


class _ApiError(Exception):
    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


def check_blocks(value: Any) -> list[dict[str, Any]]:
    """The blocks of a call, their buttons checked (see the module docstring)."""
    blocks = _json_list(value)
    for block in blocks:
        if block.get("type") != "actions":
            continue
        elements = block.get("elements") or []
        if not 1 <= len(elements) <= 25:
            raise _ApiError("invalid_blocks")
        for element in elements:
            if element.get("type") == "button" and not _valid_button(element):
                raise _ApiError("invalid_blocks")
    return blocks


def _valid_button(button: dict[str, Any]) -> bool:
    text = button.get("text") or {}
    url, value = button.get("url"), button.get("value")
    return (
        text.get("type") == "plain_text"
        and 1 <= len(str(text.get("text") or "")) <= 75
        and len(str(button.get("action_id") or "")) <= 255
        and (value is None or (isinstance(value, str) and len(value) <= 2000))
        and (url is None or (isinstance(url, str) and 1 <= len(url) <= 3000))
        and button.get("style", "primary") in ("primary", "danger")
    )


def _json_list(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        value = json.loads(value) if value else []
    return list(value or [])


def _stream_text(params: dict[str, Any]) -> str:
    """The text of a stream call, in either wire format."""
    text = str(params.get("markdown_text") or "")
    chunks = params.get("chunks")
    if isinstance(chunks, str):
        chunks = json.loads(chunks) if chunks else []
    for chunk in chunks or []:
        if isinstance(chunk, dict) and chunk.get("type") == "markdown_text":
            text += str(chunk.get("text") or "")
    return text


# ---- what people do ------------------------------------------------------------------------------
def _profile(user: str) -> dict[str, Any]:
    name = user.removeprefix("U").title()
    return {"display_name": name, "real_name": name, "name": name.lower()}


def dm(
    channel: str, user: str, text: str, *, ts: str, thread_ts: str = "", team: str = TEAM_ID
) -> dict[str, Any]:
    """A `message.im` event."""
    event: dict[str, Any] = {
        "type": "message",
        "channel": channel,
        "channel_type": "im",
        "user": user,
        "user_profile": _profile(user),
        "text": text,
        "ts": ts,
        "event_ts": ts,
        "team": team,
    }
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event


def channel_message(
    channel: str,
    user: str,
    text: str,
    *,
    ts: str,
    thread_ts: str = "",
    parent_user_id: str = "",
    team: str = TEAM_ID,
) -> dict[str, Any]:
    """A `message.channels` event."""
    event = dm(channel, user, text, ts=ts, thread_ts=thread_ts, team=team)
    event["channel_type"] = "channel"
    if parent_user_id:
        event["parent_user_id"] = parent_user_id
    return event


def mention(
    channel: str, user: str, text: str, *, ts: str, thread_ts: str = "", team: str = TEAM_ID
) -> dict[str, Any]:
    """An `app_mention` event (text should contain `<@BOT_USER_ID>`)."""
    event = dm(channel, user, text, ts=ts, thread_ts=thread_ts, team=team)
    event["type"] = "app_mention"
    del event["channel_type"]
    return event


def file_share(
    channel: str,
    user: str,
    text: str,
    files: list[dict[str, Any]],
    *,
    ts: str,
    thread_ts: str = "",
    channel_type: str = "im",
    team: str = TEAM_ID,
) -> dict[str, Any]:
    """A `message` event with subtype `file_share` carrying `files` (from `FakeSlack.add_file`)."""
    event = dm(channel, user, text, ts=ts, thread_ts=thread_ts, team=team)
    event.update({"subtype": "file_share", "files": files, "channel_type": channel_type})
    return event


def home_opened(user: str) -> dict[str, Any]:
    """The `app_home_opened` event for `user` opening the Home tab."""
    return {
        "type": "app_home_opened",
        "user": user,
        "channel": "D" + user.removeprefix("U"),
        "tab": "home",
        "event_ts": f"{time.time():.6f}",
    }


def envelope(event: dict[str, Any], *, event_id: str = "") -> dict[str, Any]:
    """The Events API body (`event_callback`) around one event."""
    return {
        "token": "legacy-verification-token",
        "team_id": TEAM_ID,
        "api_app_id": APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": event_id or "Ev" + uuid.uuid4().hex[:10].upper(),
        "event_time": int(time.time()),
        "authorizations": [
            {
                "team_id": TEAM_ID,
                "user_id": BOT_USER_ID,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
    }


def button_press(
    channel: str,
    user: str,
    message: Message,
    value: str = "",
    *,
    url: str = "",
    action_ts: str = "",
) -> dict[str, Any]:
    """A `block_actions` payload: `user` pressed the button with `value` on `message` (or, with
    `url`, clicked the link button that opens it)."""
    button = next(
        b for b in message.buttons if (b.get("url") == url if url else b.get("value") == value)
    )
    block_id = next(
        block.get("block_id", "")
        for block in message.blocks
        if block.get("type") == "actions" and button in block.get("elements", [])
    )
    container: dict[str, Any] = {
        "type": "message",
        "message_ts": message.ts,
        "channel_id": channel,
        "is_ephemeral": False,
    }
    posted: dict[str, Any] = {"type": "message", "ts": message.ts, "text": message.text}
    if message.thread_ts:
        container["thread_ts"] = message.thread_ts
        posted["thread_ts"] = message.thread_ts
    action: dict[str, Any] = {
        "type": "button",
        "action_id": button.get("action_id", ""),
        "block_id": block_id,
        "text": button.get("text", {}),
        "action_ts": action_ts or f"{time.time():.6f}",
    }
    if "value" in button:
        action["value"] = button["value"]
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.removeprefix("U").lower(), "team_id": TEAM_ID},
        "api_app_id": APP_ID,
        "token": "legacy-verification-token",
        "container": container,
        "trigger_id": uuid.uuid4().hex,
        "team": {"id": TEAM_ID, "domain": "fake"},
        "channel": {"id": channel, "name": "fake-channel"},
        "message": posted,
        "response_url": "https://hooks.slack.test/actions/fake",
        "actions": [action],
    }


class SignedPoster:
    """Posts Events API and interactivity requests to an HTTP-mode app, signed with `secret`
    (or wrongly, or too long ago, on request)."""

    def __init__(self, url: str, secret: str = SIGNING_SECRET) -> None:
        self.url = url
        self.secret = secret
        self._session: aiohttp.ClientSession | None = None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(
        self,
        body: bytes,
        content_type: str,
        *,
        signature: str = "good",  # good | bad | stale | none
        retry_num: int | None = None,
        retry_reason: str = "http_timeout",
    ) -> int:
        timestamp = int(time.time()) - (600 if signature == "stale" else 0)
        secret = self.secret if signature != "bad" else self.secret + "-wrong"
        base = f"v0:{timestamp}:".encode() + body
        digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
        headers = {"Content-Type": content_type, "X-Slack-Request-Timestamp": str(timestamp)}
        if signature != "none":
            headers["X-Slack-Signature"] = f"v0={digest}"
        if retry_num is not None:
            headers["X-Slack-Retry-Num"] = str(retry_num)
            headers["X-Slack-Retry-Reason"] = retry_reason
        if self._session is None:
            self._session = aiohttp.ClientSession()
        async with self._session.post(self.url, data=body, headers=headers) as response:
            await response.read()
            return response.status

    async def event(self, body: dict[str, Any], **options: Any) -> int:
        return await self.post(json.dumps(body).encode(), "application/json", **options)

    async def action(self, payload: dict[str, Any], **options: Any) -> int:
        body = urlencode({"payload": json.dumps(payload)}).encode()
        return await self.post(body, "application/x-www-form-urlencoded", **options)
