"""A fake Discord on 127.0.0.1 for the real discord.py: the gateway websocket and the REST API.

Gateway (`ws://127.0.0.1:<port>/gateway`): HELLO on connect; HEARTBEAT is ACKed; IDENTIFY opens
a session (one per shard) answered with READY (its `resume_gateway_url` points back here) and a
GUILD_CREATE per guild with full channel, role and member payloads (members carry `flags`: a
missing key kills discord.py's connection task); RESUME replays what the session missed and
ends with RESUMED (an unknown session gets INVALID_SESSION). Dispatches are numbered per session
and kept for resuming: MESSAGE_CREATE (what people type, and an echo of what the bot posts, as
Discord does), THREAD_CREATE, INTERACTION_CREATE (slash commands and button presses).
`drop_gateway()` closes the socket with 4000, which discord.py answers by reconnecting and
resuming; `refuse_gateway(n)` answers the next n connection attempts 503.

REST (`http://127.0.0.1:<port>/api/v10`): `/users/@me`, `/oauth2/applications/@me` (with the
fields discord.py's login needs), `/gateway/bot`, channel messages (POST, PATCH), threads from a
message, typing, interaction callbacks (within 3 s of the interaction, once) and followup
webhooks (the first followup after a deferred "thinking…" response fills that response, and
inherits its ephemeral flag), and the bulk overwrite of application commands. Replies carry
`Content-Type: application/json` exactly (with `; charset=utf-8` discord.py reads them as text).
`fail_next()` injects failures; a 429 carries `Via` (without it discord.py takes it for a
Cloudflare ban) and `retry_after`. Optional per-channel rate enforcement (`rate_limit=(calls,
seconds)`) for benchmarks: message creates and edits in one channel share a bucket, announced
with `X-RateLimit-*` headers as Discord does, and a call over the limit gets a 429; and an
optional global limit (`global_limit=(calls, seconds)`; Discord's is 50 a second) over every
authenticated call but interaction responses, refused with a global 429.

Files (issue 13): people's messages may carry attachments (`FakeFile`), stored and served by a
CDN route (`/cdn/attachments/...`, every download recorded in `downloads`); the bot's multipart
message creates (`payload_json` + `files[n]`) are parsed, a file over `upload_limit` (Discord's
10 MiB default for bots) answered 413 "Request entity too large" (code 40005) as Discord does,
and the files kept on the message (`Message.files`); components on creates and edits are kept,
checked as Discord documents buttons (`components_problem`; 400 with code 50035 "Invalid Form
Body" otherwise): action rows of at most 5 buttons, a label of at most 80 characters, a link
button (style 5) with a `url` of at most 512 characters and no `custom_id`, every other style
with a `custom_id` of 1-100 characters and no `url` (a link's click never reaches the bot);
guild-scoped application command overwrites are kept per guild (`guild_commands`).

Every REST call is recorded (`calls`), with its JSON body and status."""

from __future__ import annotations

import asyncio
import datetime
import itertools
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from aiohttp import BodyPartReader, WSMsgType, web

from tests.fakes.loopback import LoopbackServer

API = "/api/v10"
DISCORD_EPOCH_MS = 1_420_070_400_000
EPHEMERAL = 1 << 6
LOADING = 1 << 7
ACK_DEADLINE = 3.0
UPLOAD_LIMIT = 10 * 1024 * 1024  # Discord's default per file for bots (a guild may raise it)
VOICE_MESSAGE = 1 << 13  # message flag IS_VOICE_MESSAGE
PERMISSIONS = str((1 << 41) - 1)  # everything, administrator included

# Gateway op codes
DISPATCH, HEARTBEAT, IDENTIFY, RESUME, INVALID_SESSION, HELLO, HEARTBEAT_ACK = 0, 1, 2, 6, 9, 10, 11
# Channel types
TEXT, DM, PUBLIC_THREAD = 0, 1, 11
# Interaction types
APPLICATION_COMMAND, COMPONENT = 2, 3


def _now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


@dataclass(frozen=True)
class User:
    id: str
    name: str
    bot: bool = False

    def payload(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "username": self.name.lower().replace(" ", "_"),
            "global_name": self.name,
            "discriminator": "0",
            "avatar": None,
            "bot": self.bot,
            "public_flags": 0,
            "flags": 0,
            "banner": None,
            "accent_color": None,
            "avatar_decoration_data": None,
        }


def member_payload(user: User | None = None) -> dict[str, Any]:
    """A full guild member (with `flags`); with `user` when not nested under one."""
    member: dict[str, Any] = {
        "nick": None,
        "avatar": None,
        "roles": [],
        "joined_at": "2024-01-01T00:00:00+00:00",
        "premium_since": None,
        "deaf": False,
        "mute": False,
        "flags": 0,
        "pending": False,
        "communication_disabled_until": None,
    }
    if user is not None:
        member["user"] = user.payload()
    return member


@dataclass
class Channel:
    id: str
    kind: int  # TEXT, DM or PUBLIC_THREAD
    guild_id: str | None = None
    name: str = ""
    parent_id: str | None = None
    owner_id: str | None = None
    recipient: User | None = None

    def payload(self) -> dict[str, Any]:
        if self.kind == DM:
            recipients = [self.recipient.payload()] if self.recipient else []
            return {
                "id": self.id,
                "type": DM,
                "recipients": recipients,
                "last_message_id": None,
                "flags": 0,
            }
        data: dict[str, Any] = {
            "id": self.id,
            "type": self.kind,
            "guild_id": self.guild_id,
            "name": self.name,
            "parent_id": self.parent_id,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "flags": 0,
        }
        if self.kind == PUBLIC_THREAD:
            data.update(
                owner_id=self.owner_id,
                message_count=0,
                member_count=1,
                total_message_sent=0,
                thread_metadata={
                    "archived": False,
                    "auto_archive_duration": 1440,
                    "archive_timestamp": _now_iso(),
                    "locked": False,
                    "create_timestamp": _now_iso(),
                },
            )
        else:
            data.update(position=0, permission_overwrites=[], nsfw=False, topic=None)
        return data


@dataclass
class Guild:
    id: str
    name: str
    channels: dict[str, Channel] = field(default_factory=dict)  # by name
    members: list[User] = field(default_factory=list)

    def channel(self, name: str) -> Channel:
        return self.channels[name]


@dataclass
class FakeFile:
    """An attachment: what a person attaches (`claimed_size` lies when set), or what the bot
    uploaded."""

    filename: str
    data: bytes = field(repr=False)
    content_type: str | None = None
    voice: bool = False  # a voice message (duration and waveform set, as Discord does)
    claimed_size: int | None = None
    id: str = ""  # given when stored

    @property
    def size(self) -> int:
        return len(self.data) if self.claimed_size is None else self.claimed_size


@dataclass
class Message:
    id: str
    channel_id: str
    author: User
    content: str
    components: list[Any] = field(default_factory=list)
    flags: int = 0
    mentions: list[User] = field(default_factory=list)
    edits: int = 0
    interaction_id: str = ""  # an interaction response or followup
    files: list[FakeFile] = field(default_factory=list)  # attachments, either way

    @property
    def ephemeral(self) -> bool:
        return bool(self.flags & EPHEMERAL)

    def buttons(self) -> list[dict[str, Any]]:
        return [item for row in self.components for item in row.get("components", [])]


@dataclass
class Interaction:
    id: str
    token: str
    kind: int  # APPLICATION_COMMAND or COMPONENT
    user: User
    channel_id: str
    name: str  # the command, or the button's custom id
    created: float = field(default_factory=time.monotonic)
    callback: dict[str, Any] | None = None  # what the bot answered first
    callback_after: float | None = None  # seconds from the interaction to that answer
    original_id: str = ""  # the deferred response message, filled by the first followup
    answered: bool = False
    followups: list[str] = field(default_factory=list)  # message ids

    @property
    def deferred_ephemeral(self) -> bool:
        data = (self.callback or {}).get("data") or {}
        return bool(data.get("flags", 0) & EPHEMERAL)


@dataclass
class Call:
    method: str
    path: str
    route: str  # e.g. "create_message"
    channel: str  # the channel id the call is about, or ""
    body: Any
    status: int
    at: float
    query: dict[str, str] = field(default_factory=dict)
    limited: str = ""  # a 429's scope: "channel", "global" or "injected"
    files: list[FakeFile] = field(default_factory=list)  # a multipart call's `files[n]`


@dataclass
class _Failure:
    route: str
    status: int
    retry_after: float
    times: int
    channel: str
    is_global: bool
    via: bool


@dataclass
class _Session:
    id: str
    shard: tuple[int, int]
    seq: int = 0
    sent: list[dict[str, Any]] = field(default_factory=list)
    outbox: asyncio.Queue[dict[str, Any] | None] | None = None  # the live connection's
    socket: web.WebSocketResponse | None = None


_ROUTES: tuple[tuple[str, re.Pattern[str], str], ...] = tuple(
    (method, re.compile(pattern + "$"), name)
    for method, pattern, name in (
        ("GET", r"/users/@me", "me"),
        ("GET", r"/oauth2/applications/@me", "application"),
        ("GET", r"/gateway(?:/bot)?", "gateway"),
        ("POST", r"/channels/(?P<channel>\d+)/messages", "create_message"),
        ("PATCH", r"/channels/(?P<channel>\d+)/messages/(?P<message>\d+)", "edit_message"),
        ("POST", r"/channels/(?P<channel>\d+)/messages/(?P<message>\d+)/threads", "start_thread"),
        ("POST", r"/channels/(?P<channel>\d+)/typing", "typing"),
        ("POST", r"/interactions/(?P<interaction>\d+)/(?P<token>[^/]+)/callback", "callback"),
        ("POST", r"/webhooks/(?P<app>\d+)/(?P<token>[^/]+)", "followup"),
        (
            "PATCH",
            r"/webhooks/(?P<app>\d+)/(?P<token>[^/]+)/messages/(?P<message>\d+|@original)",
            "edit_followup",
        ),
        ("PUT", r"/applications/(?P<app>\d+)/commands", "commands"),
        (
            "PUT",
            r"/applications/(?P<app>\d+)/guilds/(?P<guild>\d+)/commands",
            "guild_commands",
        ),
    )
)
MESSAGE_ROUTES = ("create_message", "edit_message")
_FILES = web.RequestKey("files", list)  # a multipart call's files, for its handler


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON reply with `Content-Type: application/json` exactly, as Discord sends it."""
    return web.Response(
        body=json.dumps(data).encode(),
        status=status,
        headers={"Content-Type": "application/json", **(headers or {})},
    )


def _error(status: int, code: int, message: str) -> web.Response:
    return _json({"code": code, "message": message}, status)


LINK_STYLE = 5


def components_problem(body: dict[str, Any]) -> str | None:
    """What Discord would refuse in a body's (or an interaction response's) components."""
    data = body.get("data")
    rows = body.get("components", data.get("components") if isinstance(data, dict) else None)
    for row in rows or []:
        items = row.get("components") or []
        if row.get("type") != 1 or not 1 <= len(items) <= 5:
            return "components: an action row holds 1-5 components"
        for button in items:
            if button.get("type") != 2:
                continue
            url, custom_id = button.get("url"), button.get("custom_id")
            if len(str(button.get("label") or "")) > 80:
                return "components.label: Must be 80 or fewer in length."
            if button.get("style") == LINK_STYLE:
                if not url or len(str(url)) > 512 or custom_id is not None:
                    return "components: a link button has a url (at most 512) and no custom_id"
            elif url is not None or not 1 <= len(str(custom_id or "")) <= 100:
                return "components: a button has a custom_id (1-100) and no url"
    return None


class FakeDiscord(LoopbackServer):
    _runner_options: ClassVar[dict[str, Any]] = {"handle_signals": False}

    def __init__(
        self,
        *,
        token: str = "fake-discord-token",
        heartbeat_interval_ms: int = 41_250,
        rate_limit: tuple[int, float] | None = None,
        global_limit: tuple[int, float] | None = None,
        echo_own_messages: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.token = token
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.rate_limit = rate_limit
        self.global_limit = global_limit
        self.echo_own_messages = echo_own_messages
        self._clock = clock
        self._ids = itertools.count((int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22)
        self.bot = User(self.snowflake(), "Switchboard", bot=True)
        self.owner = User(self.snowflake(), "Owner")
        self.application_id = self.bot.id
        self.guilds: dict[str, Guild] = {}
        self.channels: dict[str, Channel] = {}
        self.messages: dict[str, Message] = {}
        self.interactions: dict[str, Interaction] = {}
        self.commands: list[dict[str, Any]] = []
        self.guild_commands: dict[str, list[dict[str, Any]]] = {}  # guild id -> its overwrite
        self.upload_limit = UPLOAD_LIMIT
        self.cdn: dict[str, FakeFile] = {}  # attachment id -> the file people attached
        self.downloads: list[str] = []  # attachment ids, one per CDN fetch
        self.calls: list[Call] = []
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.heartbeats = 0
        self.refused = 0  # gateway connection attempts answered 503
        self._refused_gateways = 0
        self._dms: dict[str, Channel] = {}
        self._sessions: dict[str, _Session] = {}
        self._shard_sessions: dict[int, _Session] = {}
        self._failures: list[_Failure] = []
        self._buckets: dict[str, tuple[int, float]] = {}  # channel -> (calls, window end)
        self._global_bucket: tuple[int, float] = (0, -1.0)
        self._writers: set[asyncio.Task[None]] = set()

    # ---- lifecycle --------------------------------------------------------------------------------
    def _routes(self, app: web.Application) -> None:
        app.router.add_get("/gateway", self._gateway)
        app.router.add_route("*", API + "/{tail:.*}", self._rest)
        app.router.add_get("/cdn/attachments/{channel}/{attachment}/{name}", self._cdn)

    async def _before_close(self) -> None:
        for session in self._sessions.values():
            if session.socket is not None and not session.socket.closed:
                await session.socket.close(code=1001)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{API}"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    def snowflake(self) -> str:
        return str(next(self._ids))

    # ---- the world ----------------------------------------------------------------------------------
    def user(self, name: str) -> User:
        return User(self.snowflake(), name)

    def add_guild(
        self, name: str = "Switchboard HQ", channels: tuple[str, ...] = ("general",)
    ) -> Guild:
        guild = Guild(self.snowflake(), name, members=[self.bot])
        for channel_name in channels:
            channel = Channel(self.snowflake(), TEXT, guild.id, channel_name)
            guild.channels[channel_name] = channel
            self.channels[channel.id] = channel
        self.guilds[guild.id] = guild
        return guild

    def join(self, guild: Guild, *users: User) -> None:
        guild.members.extend(users)

    def dm_channel(self, user: User) -> Channel:
        channel = self._dms.get(user.id)
        if channel is None:
            channel = Channel(self.snowflake(), DM, recipient=user)
            self._dms[user.id] = channel
            self.channels[channel.id] = channel
        return channel

    # ---- what people do -----------------------------------------------------------------------------
    def dm(self, user: User, text: str, *, files: tuple[FakeFile, ...] = ()) -> Message:
        """`user` writes to the bot in their DM, attaching `files`."""
        return self._post(self.dm_channel(user), user, text, [], files)

    def post(
        self,
        channel_id: str,
        user: User,
        text: str,
        *,
        mention: bool = False,
        files: tuple[FakeFile, ...] = (),
    ) -> Message:
        """`user` writes in a guild channel or thread; `mention` puts the bot's mention first."""
        content = f"<@{self.bot.id}> {text}".rstrip() if mention else text
        mentioned = [self.bot] if mention else []
        return self._post(self.channels[channel_id], user, content, mentioned, files)

    def _post(
        self,
        channel: Channel,
        user: User,
        content: str,
        mentioned: list[User],
        files: tuple[FakeFile, ...] = (),
    ) -> Message:
        message = Message(self.snowflake(), channel.id, user, content, mentions=mentioned)
        for file in files:
            file.id = self.snowflake()
            self.cdn[file.id] = file
            message.files.append(file)
        if any(file.voice for file in files):
            message.flags |= VOICE_MESSAGE
        self.messages[message.id] = message
        self._dispatch("MESSAGE_CREATE", self._message_payload(message), channel.guild_id)
        return message

    def slash(
        self,
        user: User,
        command: str,
        *,
        channel_id: str,
        options: dict[str, str] | None = None,
    ) -> Interaction:
        """`user` runs a slash command in a channel (a DM channel id, a guild channel or thread);
        one of the guild's own commands carries its `guild_id`, as Discord sends it."""
        data: dict[str, Any] = {"id": self.snowflake(), "name": command, "type": 1}
        guild = self.channels[channel_id].guild_id
        if guild is not None and any(
            c.get("name") == command for c in self.guild_commands.get(guild, [])
        ):
            data["guild_id"] = guild
        if options:
            data["options"] = [
                {"name": name, "type": 3, "value": value} for name, value in options.items()
            ]
        return self._interact(user, APPLICATION_COMMAND, channel_id, command, data, None)

    def press(self, user: User, message_id: str, custom_id: str) -> Interaction:
        """`user` presses the button `custom_id` under message `message_id`."""
        message = self.messages[message_id]
        data = {"custom_id": custom_id, "component_type": 2}
        return self._interact(user, COMPONENT, message.channel_id, custom_id, data, message)

    def _interact(
        self,
        user: User,
        kind: int,
        channel_id: str,
        name: str,
        data: dict[str, Any],
        message: Message | None,
    ) -> Interaction:
        channel = self.channels[channel_id]
        interaction = Interaction(
            self.snowflake(), f"tok-{self.snowflake()}", kind, user, channel_id, name
        )
        self.interactions[interaction.id] = interaction
        payload: dict[str, Any] = {
            "id": interaction.id,
            "application_id": self.application_id,
            "type": kind,
            "data": data,
            "channel_id": channel_id,
            "channel": channel.payload(),
            "token": interaction.token,
            "version": 1,
            "app_permissions": PERMISSIONS,
            "locale": "en-US",
            "entitlements": [],
            "attachment_size_limit": 26_214_400,
        }
        if channel.guild_id is not None:
            member = member_payload(user)
            member["permissions"] = PERMISSIONS
            payload.update(
                guild_id=channel.guild_id,
                guild={"id": channel.guild_id, "locale": "en-US", "features": []},
                guild_locale="en-US",
                member=member,
                context=0,
                authorizing_integration_owners={"0": channel.guild_id},
            )
        else:
            payload.update(
                user=user.payload(), context=1, authorizing_integration_owners={"1": user.id}
            )
        if message is not None:
            payload["message"] = self._message_payload(message)
        self._dispatch("INTERACTION_CREATE", payload, channel.guild_id)
        return interaction

    # ---- control ------------------------------------------------------------------------------------
    def fail_next(
        self,
        route: str,
        *,
        status: int = 429,
        retry_after: float = 0.3,
        times: int = 1,
        channel: str = "",
        is_global: bool = False,
        via: bool = True,
    ) -> None:
        """The next `times` calls to `route` (in `channel`, if given) fail with `status`."""
        self._failures.append(_Failure(route, status, retry_after, times, channel, is_global, via))

    async def drop_gateway(self, code: int = 4000) -> None:
        """Close every gateway socket; sessions stay resumable, dispatches wait for the resume."""
        for session in self._sessions.values():
            ws, session.socket = session.socket, None
            if session.outbox is not None:
                session.outbox.put_nowait(None)
                session.outbox = None
            if ws is not None and not ws.closed:
                await ws.close(code=code)

    # ---- what the bot did ---------------------------------------------------------------------------
    def routes(self, name: str, channel: str | None = None) -> list[Call]:
        return [
            c for c in self.calls if c.route == name and (channel is None or c.channel == channel)
        ]

    def bot_messages(self, channel_id: str) -> list[Message]:
        """What the bot posted in a channel (followups included), oldest first."""
        return [
            m
            for m in self.messages.values()
            if m.channel_id == channel_id and m.author.id == self.bot.id
        ]

    def text_in(self, channel_id: str) -> str:
        return "\n".join(m.content for m in self.bot_messages(channel_id))

    def threads(self) -> list[Channel]:
        return [c for c in self.channels.values() if c.kind == PUBLIC_THREAD]

    def message_bodies(self) -> list[dict[str, Any]]:
        """Bodies of every call that posted or edited message text."""
        wanted = ("create_message", "edit_message", "followup", "edit_followup")
        return [c.body for c in self.calls if c.route in wanted and isinstance(c.body, dict)]

    # ---- gateway ------------------------------------------------------------------------------------
    def _shard_of(self, guild_id: str | None) -> int:
        shards = max((s.shard[1] for s in self._shard_sessions.values()), default=1)
        return 0 if guild_id is None else (int(guild_id) >> 22) % shards

    def _dispatch(self, event: str, data: dict[str, Any], guild_id: str | None) -> None:
        session = self._shard_sessions.get(self._shard_of(guild_id))
        if session is None:
            return  # nobody connected: lost, as on Discord
        self._send_event(session, event, data)

    def _send_event(self, session: _Session, event: str, data: dict[str, Any]) -> None:
        session.seq += 1
        frame = {"op": DISPATCH, "t": event, "s": session.seq, "d": data}
        session.sent.append(frame)
        if session.outbox is not None:
            session.outbox.put_nowait(frame)

    def refuse_gateway(self, count: int = 1) -> None:
        """The next `count` gateway connection attempts are answered 503."""
        self._refused_gateways += count

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        if self._refused_gateways > 0:
            self._refused_gateways -= 1
            self.refused += 1
            return web.Response(status=503)
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        outbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        writer = asyncio.create_task(self._write(ws, outbox))
        self._writers.add(writer)
        writer.add_done_callback(self._writers.discard)
        outbox.put_nowait({"op": HELLO, "d": {"heartbeat_interval": self.heartbeat_interval_ms}})
        session: _Session | None = None
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                op, data = frame.get("op"), frame.get("d")
                if op == HEARTBEAT:
                    self.heartbeats += 1
                    outbox.put_nowait({"op": HEARTBEAT_ACK, "d": None})
                elif op == IDENTIFY:
                    session = self._identify(data, ws, outbox)
                elif op == RESUME:
                    session = self._resume(data, ws, outbox)
        finally:
            if session is not None and session.socket is ws:
                session.socket, session.outbox = None, None
            outbox.put_nowait(None)
        return ws

    async def _write(
        self, ws: web.WebSocketResponse, outbox: asyncio.Queue[dict[str, Any] | None]
    ) -> None:
        while (frame := await outbox.get()) is not None:
            if ws.closed:
                return
            frame.setdefault("s", None)
            frame.setdefault("t", None)
            try:
                await ws.send_str(json.dumps(frame))
            except ConnectionError:
                return

    def _identify(
        self,
        data: dict[str, Any],
        ws: web.WebSocketResponse,
        outbox: asyncio.Queue[dict[str, Any] | None],
    ) -> _Session | None:
        if data.get("token") != self.token:
            asyncio.get_running_loop().create_task(ws.close(code=4004))  # authentication failed
            return None
        self.identifies.append(data)
        shard_id, shards = data.get("shard") or [0, 1]
        session = _Session(
            f"session-{self.snowflake()}", (shard_id, shards), outbox=outbox, socket=ws
        )
        self._sessions[session.id] = session
        self._shard_sessions[shard_id] = session
        guilds = [g for g in self.guilds.values() if (int(g.id) >> 22) % shards == shard_id]
        ready: dict[str, Any] = {
            "v": 10,
            "user": self.bot.payload(),
            "guilds": [{"id": g.id, "unavailable": True} for g in guilds],
            "session_id": session.id,
            "session_type": "normal",
            "resume_gateway_url": self.gateway_url,
            "application": {"id": self.application_id, "flags": 0},
            "private_channels": [],
            "relationships": [],
            "presences": [],
            "user_settings": {},
            "geo_ordered_rtc_regions": [],
        }
        if data.get("shard"):
            ready["shard"] = [shard_id, shards]
        self._send_event(session, "READY", ready)
        for guild in guilds:
            self._send_event(session, "GUILD_CREATE", self._guild_payload(guild))
        return session

    def _resume(
        self,
        data: dict[str, Any],
        ws: web.WebSocketResponse,
        outbox: asyncio.Queue[dict[str, Any] | None],
    ) -> _Session | None:
        session = self._sessions.get(data.get("session_id", ""))
        if session is None or data.get("token") != self.token:
            outbox.put_nowait({"op": INVALID_SESSION, "d": False})
            return None
        self.resumes.append(data)
        session.socket, session.outbox = ws, outbox
        seen = data.get("seq") or 0
        for frame in session.sent:
            if frame["s"] > seen:
                outbox.put_nowait(frame)
        self._send_event(session, "RESUMED", {})
        return session

    def _guild_payload(self, guild: Guild) -> dict[str, Any]:
        everyone = {
            "id": guild.id,
            "name": "@everyone",
            "permissions": PERMISSIONS,
            "position": 0,
            "color": 0,
            "hoist": False,
            "managed": False,
            "mentionable": False,
            "flags": 0,
            "icon": None,
            "unicode_emoji": None,
        }
        threads = [
            c.payload()
            for c in self.channels.values()
            if c.kind == PUBLIC_THREAD and c.guild_id == guild.id
        ]
        return {
            "id": guild.id,
            "name": guild.name,
            "icon": None,
            "splash": None,
            "discovery_splash": None,
            "banner": None,
            "description": None,
            "owner_id": self.owner.id,
            "afk_channel_id": None,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "premium_tier": 0,
            "premium_subscription_count": 0,
            "premium_progress_bar_enabled": False,
            "preferred_locale": "en-US",
            "system_channel_id": None,
            "system_channel_flags": 0,
            "rules_channel_id": None,
            "public_updates_channel_id": None,
            "safety_alerts_channel_id": None,
            "vanity_url_code": None,
            "application_id": None,
            "max_members": 500_000,
            "features": [],
            "roles": [everyone],
            "emojis": [],
            "stickers": [],
            "joined_at": "2024-01-01T00:00:00+00:00",
            "large": False,
            "unavailable": False,
            "member_count": len(guild.members),
            "members": [member_payload(user) for user in guild.members],
            "channels": [c.payload() for c in guild.channels.values()],
            "threads": threads,
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
        }

    # ---- REST ---------------------------------------------------------------------------------------
    def _message_payload(self, message: Message) -> dict[str, Any]:
        channel = self.channels.get(message.channel_id)
        guild_id = channel.guild_id if channel is not None else None
        data: dict[str, Any] = {
            "id": message.id,
            "channel_id": message.channel_id,
            "author": message.author.payload(),
            "content": message.content,
            "timestamp": _now_iso(),
            "edited_timestamp": _now_iso() if message.edits else None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [self._attachment_payload(message, f) for f in message.files],
            "embeds": [],
            "reactions": [],
            "pinned": False,
            "type": 0,
            "flags": message.flags,
            "components": message.components,
        }
        for user in message.mentions:
            mention = user.payload()
            if guild_id is not None:
                mention["member"] = member_payload()
            data["mentions"].append(mention)
        if guild_id is not None:
            data["guild_id"] = guild_id
            if not message.interaction_id:
                data["member"] = member_payload()
        if message.interaction_id:
            data["webhook_id"] = self.application_id
            data["application_id"] = self.application_id
        return data

    def _attachment_payload(self, message: Message, file: FakeFile) -> dict[str, Any]:
        url = f"http://127.0.0.1:{self.port}/cdn/attachments/{message.channel_id}/{file.id}/"
        data: dict[str, Any] = {
            "id": file.id,
            "filename": file.filename,
            "size": file.size,
            "url": url + file.filename,
            "proxy_url": url + file.filename,
        }
        if file.content_type is not None:
            data["content_type"] = file.content_type
        if file.voice:
            data.update(duration_secs=3.5, waveform="AAAA", flags=0)
        return data

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        """An attachment's bytes, as Discord's CDN serves them (no token needed)."""
        file = self.cdn.get(request.match_info["attachment"])
        if file is None or file.filename != request.match_info["name"]:
            return web.Response(status=404, text="Not Found")
        self.downloads.append(file.id)
        return web.Response(
            body=file.data, content_type=file.content_type or "application/octet-stream"
        )

    @staticmethod
    async def _multipart(request: web.Request) -> tuple[Any, list[FakeFile]]:
        """discord.py's upload: `payload_json` (the message) and `files[n]` (the bytes)."""
        body: Any = None
        files: list[FakeFile] = []
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                continue
            if part.name == "payload_json":
                body = json.loads(await part.read())
            elif (part.name or "").startswith("files["):
                data = bytes(await part.read())
                mime = part.headers.get("Content-Type")
                files.append(FakeFile(part.filename or "", data, mime))
        return body, files

    async def _rest(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["tail"]
        body: Any = None
        files: list[FakeFile] = []
        if request.content_type == "multipart/form-data":
            body, files = await self._multipart(request)
        elif request.can_read_body:
            raw = await request.read()
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
        route, params = "unknown", {}
        for method, pattern, name in _ROUTES:
            match = pattern.match(path)
            if match and method == request.method:
                route, params = name, match.groupdict()
                break
        call = Call(
            request.method,
            path,
            route,
            params.get("channel", ""),
            body,
            0,
            self._clock(),
            dict(request.query),
            files=files,
        )
        if route in ("followup", "edit_followup", "callback"):
            found = self._by_token(params.get("token", ""))
            call.channel = found.channel_id if found else ""
        self.calls.append(call)
        response = self._answer(route, params, body, request, call)
        call.status = response.status
        return response

    def _answer(
        self, route: str, params: dict[str, str], body: Any, request: web.Request, call: Call
    ) -> web.Response:
        interaction_route = route in ("callback", "followup", "edit_followup")
        if not interaction_route and request.headers.get("Authorization") != f"Bot {self.token}":
            return _error(401, 0, "401: Unauthorized")
        failure = self._take_failure(route, call.channel)
        if failure is not None:
            call.limited = "injected" if failure.status == 429 else ""
            return self._failure_response(failure)
        if not interaction_route and self.global_limit is not None:
            refused = self._spend_global()  # interaction responses are exempt, as on Discord
            if refused is not None:
                call.limited = "global"
                return refused
        limit_headers: dict[str, str] = {}
        if route in MESSAGE_ROUTES and self.rate_limit is not None:
            refused, limit_headers = self._spend(call.channel)
            if refused is not None:
                call.limited = "channel"
                return refused
        handler = getattr(self, f"_do_{route}", None)
        if handler is None:
            return _error(404, 0, "404: Not Found")
        if any(len(file.data) > self.upload_limit for file in call.files):
            return _error(413, 40005, "Request entity too large")
        request[_FILES] = call.files
        problem = components_problem(body) if isinstance(body, dict) else None
        if problem is not None:
            return _error(400, 50035, f"Invalid Form Body: {problem}")
        response: web.Response = handler(params, body or {}, request)
        response.headers.update(limit_headers)
        return response

    def _take_failure(self, route: str, channel: str) -> _Failure | None:
        for failure in self._failures:
            if failure.route == route and failure.channel in ("", channel) and failure.times > 0:
                failure.times -= 1
                return failure
        return None

    @staticmethod
    def _failure_response(failure: _Failure) -> web.Response:
        if failure.status != 429:
            return _error(failure.status, 0, f"{failure.status}: injected failure")
        headers = {
            "Retry-After": str(max(1, round(failure.retry_after))),
            "X-RateLimit-Scope": "user",
        }
        if failure.via:
            headers["Via"] = "1.1 google"
        body = {
            "message": "You are being rate limited.",
            "retry_after": failure.retry_after,
            "global": failure.is_global,
        }
        return _json(body, 429, headers)

    def _spend(self, channel: str) -> tuple[web.Response | None, dict[str, str]]:
        """One call from the channel's bucket, or a 429 if it is empty."""
        assert self.rate_limit is not None
        limit, window = self.rate_limit
        now = self._clock()
        used, resets = self._buckets.get(channel, (0, now + window))
        if now >= resets:
            used, resets = 0, now + window
        if used >= limit:
            retry = round(resets - now, 3)
            headers = {"Via": "1.1 google", "Retry-After": str(max(1, round(retry)))}
            body = {"message": "You are being rate limited.", "retry_after": retry, "global": False}
            return _json(body, 429, headers), {}
        used += 1
        self._buckets[channel] = (used, resets)
        reset_after = max(resets - now, 0.0)
        return None, {
            "X-RateLimit-Limit": str(limit),
            "X-RateLimit-Remaining": str(limit - used),
            "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
            "X-RateLimit-Reset-After": f"{reset_after:.3f}",
            "X-RateLimit-Bucket": "channel-messages",
        }

    def _spend_global(self) -> web.Response | None:
        assert self.global_limit is not None
        limit, window = self.global_limit
        now = self._clock()
        used, resets = self._global_bucket
        if now >= resets:
            used, resets = 0, now + window
        if used >= limit:
            retry = round(resets - now, 3)
            headers = {
                "Via": "1.1 google",
                "Retry-After": str(max(1, round(retry))),
                "X-RateLimit-Global": "true",
                "X-RateLimit-Scope": "global",
            }
            body = {"message": "You are being rate limited.", "retry_after": retry, "global": True}
            return _json(body, 429, headers)
        self._global_bucket = (used + 1, resets)
        return None

    def _by_token(self, token: str) -> Interaction | None:
        return next((i for i in self.interactions.values() if i.token == token), None)

    # one handler per route: (params, body, request) -> response
    def _do_me(self, params: dict[str, str], body: Any, request: web.Request) -> web.Response:
        return _json({**self.bot.payload(), "verified": True, "mfa_enabled": False})

    def _do_application(
        self, params: dict[str, str], body: Any, request: web.Request
    ) -> web.Response:
        return _json(
            {
                "id": self.application_id,
                "name": "Switchboard",
                "description": "",
                "icon": None,
                "bot_public": True,
                "bot_require_code_grant": False,
                "owner": self.owner.payload(),
                "verify_key": "0" * 64,
                "flags": 0,
                "team": None,
                "summary": "",
                "rpc_origins": [],
                "interactions_endpoint_url": None,
            }
        )

    def _do_gateway(self, params: dict[str, str], body: Any, request: web.Request) -> web.Response:
        return _json(
            {
                "url": self.gateway_url,
                "shards": 1,
                "session_start_limit": {
                    "total": 1000,
                    "remaining": 1000,
                    "reset_after": 0,
                    "max_concurrency": 1,
                },
            }
        )

    def _new_bot_message(
        self,
        channel_id: str,
        body: dict[str, Any],
        *,
        flags: int = 0,
        interaction: str = "",
        files: list[FakeFile] | None = None,
    ) -> Message:
        message = Message(
            self.snowflake(),
            channel_id,
            self.bot,
            str(body.get("content") or ""),
            list(body.get("components") or []),
            flags,
            interaction_id=interaction,
            files=list(files or ()),
        )
        for file in message.files:
            file.id = self.snowflake()
        self.messages[message.id] = message
        channel = self.channels.get(channel_id)
        if self.echo_own_messages and not message.ephemeral and channel is not None:
            self._dispatch("MESSAGE_CREATE", self._message_payload(message), channel.guild_id)
        return message

    @staticmethod
    def _apply_edit(message: Message, body: dict[str, Any]) -> None:
        if "content" in body:
            message.content = str(body["content"] or "")
        if "components" in body:
            message.components = list(body["components"] or [])
        message.edits += 1

    def _do_create_message(
        self, params: dict[str, str], body: Any, request: web.Request
    ) -> web.Response:
        channel = self.channels.get(params["channel"])
        if channel is None:
            return _error(404, 10003, "Unknown Channel")
        content = str(body.get("content") or "")
        files = request.get(_FILES) or []
        if not content.strip() and not body.get("components") and not files:
            return _error(400, 50006, "Cannot send an empty message")
        if len(content) > 2000:
            return _error(
                400, 50035, "Invalid Form Body: content: Must be 2000 or fewer in length."
            )
        message = self._new_bot_message(channel.id, body, files=files)
        return _json(self._message_payload(message))

    def _do_edit_message(
        self, params: dict[str, str], body: Any, request: web.Request
    ) -> web.Response:
        message = self.messages.get(params["message"])
        if message is None or message.channel_id != params["channel"] or message.ephemeral:
            return _error(404, 10008, "Unknown Message")
        if message.author.id != self.bot.id:
            return _error(403, 50005, "Cannot edit a message authored by another user")
        if len(str(body.get("content") or "")) > 2000:
            return _error(
                400, 50035, "Invalid Form Body: content: Must be 2000 or fewer in length."
            )
        self._apply_edit(message, body)
        return _json(self._message_payload(message))

    def _do_start_thread(
        self, params: dict[str, str], body: Any, request: web.Request
    ) -> web.Response:
        parent = self.channels.get(params["channel"])
        message = self.messages.get(params["message"])
        if parent is None or message is None or parent.kind != TEXT:
            return _error(404, 10008, "Unknown Message")
        if params["message"] in self.channels:
            return _error(400, 160004, "A thread has already been created for this message")
        thread = Channel(
            message.id,  # Discord gives a thread opened on a message that message's id
            PUBLIC_THREAD,
            parent.guild_id,
            str(body.get("name") or "thread")[:100],
            parent_id=parent.id,
            owner_id=self.bot.id,
        )
        self.channels[thread.id] = thread
        self._dispatch(
            "THREAD_CREATE", {**thread.payload(), "newly_created": True}, thread.guild_id
        )
        return _json(thread.payload(), 201)

    def _do_typing(self, params: dict[str, str], body: Any, request: web.Request) -> web.Response:
        if params["channel"] not in self.channels:
            return _error(404, 10003, "Unknown Channel")
        return web.Response(status=204)

    def _do_callback(self, params: dict[str, str], body: Any, request: web.Request) -> web.Response:
        interaction = self.interactions.get(params["interaction"])
        if interaction is None or interaction.token != params["token"]:
            return _error(404, 10062, "Unknown interaction")
        if interaction.callback is not None:
            return _error(400, 40060, "Interaction has already been acknowledged.")
        elapsed = time.monotonic() - interaction.created
        if elapsed > ACK_DEADLINE:
            return _error(404, 10062, "Unknown interaction")
        interaction.callback, interaction.callback_after = dict(body), elapsed
        kind = body.get("type")
        data = body.get("data") or {}
        resource: dict[str, Any] = {"type": kind}
        if kind in (4, 5):  # a message now, or "thinking…" now and the message later
            flags = int(data.get("flags", 0)) & EPHEMERAL
            content = {"content": data.get("content") or ""} if kind == 4 else {}
            message = self._new_bot_message(
                interaction.channel_id,
                content,
                flags=flags | (LOADING if kind == 5 else 0),
                interaction=interaction.id,
            )
            interaction.original_id = message.id
            interaction.answered = kind == 4
            resource["message"] = self._message_payload(message)
        if "with_response" not in request.query:
            return web.Response(status=204)
        return _json(
            {
                "interaction": {
                    "id": interaction.id,
                    "type": interaction.kind,
                    "response_message_id": interaction.original_id or None,
                    "response_message_loading": kind == 5,
                    "response_message_ephemeral": bool(data.get("flags", 0) & EPHEMERAL),
                },
                "resource": resource,
            }
        )

    def _do_followup(self, params: dict[str, str], body: Any, request: web.Request) -> web.Response:
        interaction = self._by_token(params["token"])
        if interaction is None or params["app"] != self.application_id:
            return _error(404, 10015, "Unknown Webhook")
        if interaction.callback is None:
            return _error(404, 10015, "Unknown Webhook")
        original = self.messages.get(interaction.original_id)
        if original is not None and not interaction.answered:
            # the first followup replaces "thinking…", keeping the deferral's ephemeral flag
            interaction.answered = True
            original.flags &= ~LOADING
            self._apply_edit(original, body)
            message = original
        else:
            flags = int(body.get("flags", 0)) & EPHEMERAL
            message = self._new_bot_message(
                interaction.channel_id, body, flags=flags, interaction=interaction.id
            )
        interaction.followups.append(message.id)
        if request.query.get("wait") not in ("true", "1", "True"):
            return web.Response(status=204)
        return _json(self._message_payload(message))

    def _do_edit_followup(
        self, params: dict[str, str], body: Any, request: web.Request
    ) -> web.Response:
        interaction = self._by_token(params["token"])
        if interaction is None:
            return _error(404, 10015, "Unknown Webhook")
        message_id = (
            interaction.original_id if params["message"] == "@original" else params["message"]
        )
        message = self.messages.get(message_id)
        if message is None or message.interaction_id != interaction.id:
            return _error(404, 10008, "Unknown Message")
        self._apply_edit(message, body)
        return _json(self._message_payload(message))

    def _do_guild_commands(
        self, params: dict[str, str], body: Any, request: web.Request
    ) -> web.Response:
        if params["guild"] not in self.guilds:
            return _error(404, 10004, "Unknown Guild")
        self.guild_commands[params["guild"]] = [dict(command) for command in body]
        return _json(
            [
                {
                    "id": self.snowflake(),
                    "application_id": self.application_id,
                    "guild_id": params["guild"],
                    "version": self.snowflake(),
                    "default_member_permissions": None,
                    "nsfw": False,
                    "options": [],
                    **command,
                }
                for command in self.guild_commands[params["guild"]]
            ]
        )

    def _do_commands(self, params: dict[str, str], body: Any, request: web.Request) -> web.Response:
        self.commands = [dict(command) for command in body]
        registered = [
            {
                "id": self.snowflake(),
                "application_id": self.application_id,
                "version": self.snowflake(),
                "default_member_permissions": None,
                "dm_permission": True,
                "nsfw": False,
                "options": [],
                **command,
            }
            for command in self.commands
        ]
        return _json(registered)
