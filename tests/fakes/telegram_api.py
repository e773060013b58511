"""A fake Telegram Bot API on 127.0.0.1 for the real python-telegram-bot to talk to.

    async with FakeBotApi() as api:          # api.url -> ApplicationBuilder().base_url(url + "/bot")
        api.add_group(-100123, forum=True)
        api.dm(alice, "hello")               # an update for getUpdates (or the webhook)
        ...
        api.calls_to("sendMessage", chat_id=alice.id)

`POST /bot<TOKEN>/<method>` with form-encoded (what PTB sends: strings, numbers and booleans as
text, objects as JSON text), multipart or JSON bodies. Answers `{"ok":true,"result":...}` with
full objects PTB parses, or `{"ok":false,"error_code","description","parameters"?}` with the same
HTTP status. Every call is recorded (`calls`), including the rejected ones.

Reproduced behaviour: long-poll `getUpdates` (`timeout`, `offset` confirms, released at once on
`close()`), 409 while a webhook is set; `sendMessage`/`editMessageText` check HTML (`can't parse
entities`), the 4096 UTF-16 limit after entity parsing (`message is too long`), and identical
edits (`message is not modified`); `sendMessageDraft` only in private chats; callback queries
answered once. Failures on demand: `fail_next(method, code, ...)` for the next N calls,
`garble_next(method, ...)` for answers PTB cannot parse (a bug nobody maps), `reset_next(method)`
(the connection is reset instead of answered), users who
blocked the bot (403), and optional per-chat rate enforcement (`rate_interval`: a second
message-producing call in one chat within that many seconds gets 429 with `retry_after`).

Files (issue 13): `store_file(data)` keeps bytes a person sent (`post_photo`, `post_document`,
`post_voice`, `post_album`, `post_media` queue the updates carrying them); `getFile` answers
a `file_path` (400 `file is too big` past 20 MB, as the cloud Bot API does) and
`GET /file/bot<TOKEN>/<file_path>` serves the bytes (token checked); `sendPhoto` (10 MB) and
`sendDocument` (50 MB; past it 413 `Request Entity Too Large`) take multipart uploads, kept in
`uploads`; captions are checked against 1024 UTF-16 units. `setMyCommands` keeps each scope's
list in `scoped_commands` (the default scope also in `commands`); inline keyboards sent with
`sendMessage` / `editMessageText` stay on the message (`Message.reply_markup`).

Reply markup is checked as the Bot API documents it (`check_reply_markup`): an inline keyboard's
buttons each have a text and exactly one action, a `url` (http(s) or tg://; else
`BUTTON_URL_INVALID`) or `callback_data` of 1-64 bytes (else `BUTTON_DATA_INVALID`); a force reply
(`sendMessage` only) has `force_reply: true`, an optional boolean `selective` and an optional
`input_field_placeholder` of 1-64 characters. A force reply is kept on the message as sent
(`Message.reply_markup`) but, as on Telegram, never shown in the message PTB reads back. With
`refuse_local_urls`, a url button to a host the real Telegram will not link (localhost, a bare IP
address, a name without a dot) is refused as it refuses one: 400 `BUTTON_URL_INVALID`."""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import json
import math
import re
import socket
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any, ClassVar
from urllib.parse import urlsplit

from aiohttp import BodyPartReader, ClientSession, web

from tests.fakes.loopback import LoopbackServer

TOKEN = "123456789:TEST-fake-token-for-switchboard-tests-x"
BOT_ID = 123456789
BOT_USERNAME = "switchboard_test_bot"
MAX_TEXT = 4096
MAX_CAPTION = 1024
MAX_DOWNLOAD = 20 * 1024 * 1024  # getFile, cloud Bot API
MAX_PHOTO = 10 * 1024 * 1024  # sendPhoto
MAX_UPLOAD = 50 * 1024 * 1024  # sendDocument and every multipart body
GARBLED = 0  # a "failure" code: answered ok, with a result of the wrong shape
# Calls that post or change a message: what Telegram's per-chat flood control counts.
RATE_LIMITED_METHODS = frozenset(
    {
        "sendMessage",
        "sendMessageDraft",
        "editMessageText",
        "editMessageReplyMarkup",
        "sendPhoto",
        "sendDocument",
    }
)
_STRING_FIELDS = frozenset(
    {"text", "parse_mode", "url", "secret_token", "action", "callback_query_id", "caption"}
)
_ALLOWED_TAGS = frozenset(
    {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "a", "code", "pre"}
    | {"blockquote", "tg-spoiler", "span", "tg-emoji"}
)


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@dataclass(frozen=True)
class User:
    id: int
    first_name: str
    username: str = ""

    def as_dict(self) -> dict[str, Any]:
        user: dict[str, Any] = {"id": self.id, "is_bot": False, "first_name": self.first_name}
        if self.username:
            user["username"] = self.username
        return user


@dataclass
class ApiCall:
    method: str
    params: dict[str, Any]
    at: float  # time.perf_counter() on arrival
    status: int = 200
    description: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def chat_id(self) -> int | None:
        chat = self.params.get("chat_id")
        return chat if isinstance(chat, int) else None


@dataclass
class Message:
    """A message in the fake's memory: what a client would show now."""

    message_id: int
    chat: dict[str, Any]
    sender: dict[str, Any]
    text: str  # after entity parsing: what people read
    markup: str | None = None  # the HTML as sent, when parse_mode was HTML
    thread: int | None = None
    reply_markup: dict[str, Any] | None = None
    reply_to: Message | None = None
    edits: int = 0
    forum_topic_created: bool = False
    media: dict[str, Any] | None = None  # photo / document / voice ... fields, as Telegram sends

    def as_dict(self) -> dict[str, Any]:
        message: dict[str, Any] = {
            "message_id": self.message_id,
            "date": int(time.time()),
            "chat": self.chat,
            "from": self.sender,
        }
        if self.forum_topic_created:
            message["forum_topic_created"] = {"name": "topic", "icon_color": 7322096}
        elif self.media is not None:
            message.update(self.media)
            if self.text:
                message["caption"] = self.text
        else:
            message["text"] = self.text
        if self.thread is not None:
            message["message_thread_id"] = self.thread
            if self.chat.get("is_forum"):
                message["is_topic_message"] = True
        if self.reply_markup and "inline_keyboard" in self.reply_markup:
            message["reply_markup"] = self.reply_markup  # a force reply is not echoed back
        if self.reply_to is not None:
            message["reply_to_message"] = self.reply_to.as_dict()
        if self.edits:
            message["edit_date"] = int(time.time())
        return message


class ApiError(Exception):
    def __init__(self, code: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.code = code
        self.description = description
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "ok": False,
            "error_code": self.code,
            "description": self.description,
        }
        if self.retry_after is not None:
            body["parameters"] = {"retry_after": self.retry_after}
        return body


@dataclass
class _Failure:
    code: int
    description: str
    retry_after: int | None
    count: int
    chat_id: int | None


class _HtmlText(HTMLParser):
    """Telegram's HTML mode: only its tags, properly nested; returns the visible text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.stack: list[str] = []
        self.error = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _ALLOWED_TAGS:
            self.error = self.error or f'Unsupported start tag "{tag}"'
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            expected = f', expected "</{self.stack[-1]}>"' if self.stack else ""
            self.error = self.error or f'Unmatched end tag "{tag}"{expected}'
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def parse_html(text: str) -> str:
    """The visible text of Telegram HTML, or ApiError 400 `can't parse entities`."""
    stray = re.search(r"<(?![a-zA-Z/])|<[^>]*$", text)
    if stray:
        raise ApiError(
            400,
            "Bad Request: can't parse entities: Unclosed start tag at byte offset "
            f"{len(text[: stray.start()].encode())}",
        )
    parser = _HtmlText()
    parser.feed(text)
    parser.close()
    if not parser.error and parser.stack:
        parser.error = f'Can\'t find end tag corresponding to start tag "{parser.stack[-1]}"'
    if parser.error:
        raise ApiError(400, f"Bad Request: can't parse entities: {parser.error}")
    return "".join(parser.parts)


class FakeBotApi(LoopbackServer):
    _runner_options: ClassVar[dict[str, Any]] = {"shutdown_timeout": 0.5, "access_log": None}

    def __init__(
        self,
        *,
        token: str = TOKEN,
        rate_interval: float | None = None,
        poll_limit: int = 100,
        refuse_local_urls: bool = False,
    ) -> None:
        super().__init__()
        self.token = token
        self.refuse_local_urls = refuse_local_urls
        self.me = {
            "id": BOT_ID,
            "is_bot": True,
            "first_name": "Switchboard",
            "username": BOT_USERNAME,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }
        self.rate_interval = rate_interval
        self.poll_limit = poll_limit
        self.calls: list[ApiCall] = []
        self.messages: dict[tuple[int, int], Message] = {}
        self.chats: dict[int, dict[str, Any]] = {}
        self.drafts: list[tuple[int, int, str]] = []  # (chat id, draft id, text)
        self.commands: list[dict[str, Any]] = []
        self.scoped_commands: dict[str, list[dict[str, Any]]] = {}  # scope key -> commands
        self.files: dict[str, StoredFile] = {}  # file_id -> what a person sent
        self.uploads: list[Upload] = []  # what the bot sent as photos and documents
        self.downloads: list[str] = []  # file paths the bot fetched
        self._file_ids = itertools.count(1)
        self.webhook: dict[str, Any] = {}
        self.answers: dict[str, dict[str, Any]] = {}  # callback query id -> answer params
        self.blocked: set[int] = set()  # chats whose user blocked the bot
        self.rate_limited = 0  # 429s the rate enforcement answered
        self._updates: deque[dict[str, Any]] = deque()
        self._update_ids = itertools.count(1000)
        self._message_ids = itertools.count(1)
        self._query_ids = itertools.count(1)
        self._open_queries: set[str] = set()
        self._failures: dict[str, list[_Failure]] = {}
        self._resets: dict[str, int] = {}
        self._last_call: dict[int, float] = {}
        self._new_update = asyncio.Event()
        self._closing = asyncio.Event()

    # ---- lifecycle ----------------------------------------------------------------------------
    def _routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)

    async def _before_close(self) -> None:
        self._closing.set()  # long polls return now

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ---- the world: chats, people, what they do -----------------------------------------------
    def private_chat(self, user: User) -> dict[str, Any]:
        return self.chats.setdefault(
            user.id,
            {"id": user.id, "type": "private", "first_name": user.first_name}
            | ({"username": user.username} if user.username else {}),
        )

    def add_group(self, chat_id: int, title: str = "Team", *, forum: bool = False) -> None:
        self.chats[chat_id] = {
            "id": chat_id,
            "type": "supergroup",
            "title": title,
            **({"is_forum": True} if forum else {}),
        }

    def add_topic(self, chat_id: int, creator: User) -> int:
        """A forum topic; returns its message_thread_id (the id of its first message)."""
        message_id = next(self._message_ids)
        root = Message(
            message_id,
            self.chats[chat_id],
            creator.as_dict(),
            "",
            thread=message_id,
            forum_topic_created=True,
        )
        self.messages[(chat_id, message_id)] = root
        return message_id

    def dm(self, user: User, text: str) -> dict[str, Any]:
        return self.post_message(self.private_chat(user)["id"], user, text)

    def post_message(
        self,
        chat_id: int,
        user: User,
        text: str,
        *,
        thread: int | None = None,
        reply_to: Message | None = None,
    ) -> dict[str, Any]:
        """Someone writes in a chat: queues (and returns) the update."""
        chat = self.chats[chat_id]
        message_id = next(self._message_ids)
        if reply_to is None and thread is not None:
            reply_to = self.messages.get((chat_id, thread))  # how topics look in the Bot API
        message = Message(message_id, chat, user.as_dict(), text, thread=thread, reply_to=reply_to)
        self.messages[(chat_id, message_id)] = message
        payload = message.as_dict()
        entities = _entities(text)
        if entities:
            payload["entities"] = entities
        return self.push({"message": payload})

    # ---- files people send (issue 13) --------------------------------------------------------
    def store_file(
        self, data: bytes, *, claimed_size: int | None = -1, **fields: Any
    ) -> dict[str, Any]:
        """Keep `data` as a file on Telegram's side; returns the file object a message carries
        (`file_size` is the real size unless `claimed_size` says otherwise, None: absent)."""
        number = next(self._file_ids)
        file_id = f"FILE-{number}"
        stored = StoredFile(file_id, f"documents/file_{number}", data)
        self.files[file_id] = stored
        size = len(data) if claimed_size == -1 else claimed_size
        item = {"file_id": file_id, "file_unique_id": f"U{number}", **fields}
        if size is not None:
            item["file_size"] = size
        return item

    def post_media(
        self,
        chat_id: int,
        user: User,
        media: dict[str, Any],
        caption: str = "",
        *,
        thread: int | None = None,
        media_group: str | None = None,
        reply_to: Message | None = None,
    ) -> dict[str, Any]:
        """Someone sends a message carrying `media` (e.g. {"sticker": {...}}) and a caption."""
        chat = self.chats[chat_id]
        message_id = next(self._message_ids)
        if reply_to is None and thread is not None:
            reply_to = self.messages.get((chat_id, thread))
        fields = dict(media)
        if media_group is not None:
            fields["media_group_id"] = media_group
        message = Message(
            message_id,
            chat,
            user.as_dict(),
            caption,
            thread=thread,
            reply_to=reply_to,
            media=fields,
        )
        self.messages[(chat_id, message_id)] = message
        payload = message.as_dict()
        entities = _entities(caption)
        if entities:
            payload["caption_entities"] = entities
        return self.push({"message": payload})

    def photo_sizes(self, data: bytes, *, thumbnail: bytes = b"thumb") -> list[dict[str, Any]]:
        """A photo as Telegram offers it: a small thumbnail, then the full size."""
        return [
            self.store_file(thumbnail, width=90, height=60),
            self.store_file(data, width=1280, height=853),
        ]

    def post_photo(
        self, chat_id: int, user: User, data: bytes, caption: str = "", **options: Any
    ) -> dict[str, Any]:
        return self.post_media(chat_id, user, {"photo": self.photo_sizes(data)}, caption, **options)

    def post_document(
        self,
        chat_id: int,
        user: User,
        data: bytes,
        name: str,
        mime: str,
        caption: str = "",
        *,
        claimed_size: int | None = -1,
        **options: Any,
    ) -> dict[str, Any]:
        document = self.store_file(data, claimed_size=claimed_size, file_name=name, mime_type=mime)
        return self.post_media(chat_id, user, {"document": document}, caption, **options)

    def post_voice(self, chat_id: int, user: User, data: bytes, **options: Any) -> dict[str, Any]:
        voice = self.store_file(data, duration=3, mime_type="audio/ogg")
        return self.post_media(chat_id, user, {"voice": voice}, **options)

    def post_album(
        self, chat_id: int, user: User, photos: list[bytes], caption: str = "", **options: Any
    ) -> list[dict[str, Any]]:
        """Photos sent together: one update per part, the caption on the first."""
        group = f"album-{next(self._file_ids)}"
        return [
            self.post_photo(
                chat_id, user, data, caption if index == 0 else "", media_group=group, **options
            )
            for index, data in enumerate(photos)
        ]

    def press(self, user: User, message: Message, data: str) -> dict[str, Any]:
        """Someone presses an inline button of `message`."""
        query_id = str(next(self._query_ids))
        self._open_queries.add(query_id)
        return self.push(
            {
                "callback_query": {
                    "id": query_id,
                    "from": user.as_dict(),
                    "chat_instance": str(message.chat["id"]),
                    "message": message.as_dict(),
                    "data": data,
                }
            }
        )

    def push(self, update: dict[str, Any]) -> dict[str, Any]:
        update = {"update_id": next(self._update_ids), **update}
        self._updates.append(update)
        self._new_update.set()
        return update

    def take_update(self, update: dict[str, Any]) -> dict[str, Any]:
        """Remove a queued update (to deliver it by webhook instead)."""
        self._updates.remove(update)
        return update

    async def post_webhook(
        self, update: dict[str, Any], *, secret: str | None, content_type: str = "application/json"
    ) -> int:
        """Deliver `update` to the registered webhook as Telegram would; returns the status."""
        headers = {"Content-Type": content_type}
        if secret is not None:
            headers["X-Telegram-Bot-Api-Secret-Token"] = secret
        async with (
            ClientSession() as session,
            session.post(self.webhook["url"], data=json.dumps(update), headers=headers) as reply,
        ):
            return reply.status

    # ---- failures on demand -------------------------------------------------------------------
    def fail_next(
        self,
        method: str,
        code: int,
        description: str = "",
        *,
        count: int = 1,
        retry_after: int | None = None,
        chat_id: int | None = None,
    ) -> None:
        """The next `count` calls of `method` (to `chat_id`, if given) fail with `code`."""
        if not description:
            description = {
                429: f"Too Many Requests: retry after {retry_after or 1}",
                400: "Bad Request: something is wrong",
                403: "Forbidden: bot was blocked by the user",
            }.get(code, "Internal Server Error")
        if code == 429 and retry_after is None:
            retry_after = 1
        self._failures.setdefault(method, []).append(
            _Failure(code, description, retry_after, count, chat_id)
        )

    def garble_next(self, method: str, *, count: int = 1, chat_id: int | None = None) -> None:
        """The next `count` calls of `method` (to `chat_id`, if given) are answered "ok" with a
        result that is not the object PTB expects, so PTB raises something no adapter maps."""
        self._failures.setdefault(method, []).append(_Failure(GARBLED, "", None, count, chat_id))

    def reset_next(self, method: str, *, count: int = 1) -> None:
        """The next `count` calls of `method` get a TCP reset instead of an answer."""
        self._resets[method] = self._resets.get(method, 0) + count

    # ---- what the bot did ---------------------------------------------------------------------
    def calls_to(self, *methods: str, chat_id: int | None = None, ok: bool = True) -> list[ApiCall]:
        return [
            call
            for call in self.calls
            if (not methods or call.method in methods)
            and (chat_id is None or call.chat_id == chat_id)
            and (not ok or call.ok)
        ]

    def chat_messages(self, chat_id: int, *, thread: int | None = None) -> list[Message]:
        """The bot's messages in a chat (or topic), in the order they were sent."""
        return [
            message
            for (chat, _), message in sorted(self.messages.items(), key=lambda item: item[0][1])
            if chat == chat_id
            and message.sender.get("id") == BOT_ID
            and (thread is None or message.thread == thread)
        ]

    def chat_text(self, chat_id: int) -> str:
        return "\n".join(message.text for message in self.chat_messages(chat_id))

    # ---- the HTTP side ------------------------------------------------------------------------
    async def _download(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return web.json_response(
                {"ok": False, "error_code": 401, "description": "Unauthorized"}, status=401
            )
        path = request.match_info["path"]
        stored = next((file for file in self.files.values() if file.path == path), None)
        if stored is None:
            return web.json_response(
                {"ok": False, "error_code": 404, "description": "Not Found"}, status=404
            )
        self.downloads.append(path)
        return web.Response(body=stored.data, content_type="application/octet-stream")

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        try:
            params = await _read_params(request)
        except ApiError as exc:  # an upload past what Telegram takes
            self.calls.append(ApiCall(method, {}, time.perf_counter(), exc.code, exc.description))
            return web.json_response(exc.body(), status=exc.code)
        call = ApiCall(method, params, time.perf_counter())
        self.calls.append(call)
        if self._resets.get(method, 0) > 0:
            self._resets[method] -= 1
            call.status, call.description = 0, "connection reset"
            _reset_connection(request)
            return web.Response()  # never reaches the client: its connection is gone
        try:
            if request.match_info["token"] != self.token:
                raise ApiError(401, "Unauthorized")
            handler = getattr(self, f"_m_{method}", None)
            if handler is None:
                raise ApiError(404, "Not Found: method not found")
            self._injected_failure(method, params)
            self._enforce_rate(method, params, call.at)
            result = await handler(params)
        except ApiError as exc:
            call.status, call.description = exc.code, exc.description
            if exc.code == GARBLED:
                return web.json_response({"ok": True, "result": {"garbled": True}})
            return web.json_response(exc.body(), status=exc.code)
        return web.json_response({"ok": True, "result": result})

    def _injected_failure(self, method: str, params: dict[str, Any]) -> None:
        for failure in self._failures.get(method, []):
            if failure.count > 0 and failure.chat_id in (None, params.get("chat_id")):
                failure.count -= 1
                raise ApiError(failure.code, failure.description, failure.retry_after)

    def _enforce_rate(self, method: str, params: dict[str, Any], now: float) -> None:
        chat = params.get("chat_id")
        if self.rate_interval is None or method not in RATE_LIMITED_METHODS:
            return
        if not isinstance(chat, int):
            return
        elapsed = now - self._last_call.get(chat, -math.inf)
        if elapsed < self.rate_interval:
            self.rate_limited += 1
            wait = max(1, math.ceil(self.rate_interval - elapsed))
            raise ApiError(429, f"Too Many Requests: retry after {wait}", wait)
        self._last_call[chat] = now

    def _chat(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = params.get("chat_id")
        chat = self.chats.get(chat_id) if isinstance(chat_id, int) else None
        if chat is None:
            raise ApiError(400, "Bad Request: chat not found")
        if chat["id"] in self.blocked:
            raise ApiError(403, "Forbidden: bot was blocked by the user")
        return chat

    @staticmethod
    def _visible_text(params: dict[str, Any]) -> tuple[str, str | None]:
        text = str(params.get("text") or "")
        markup = None
        if str(params.get("parse_mode") or "").upper() == "HTML":
            markup, text = text, parse_html(text)
        if not text.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        if utf16_len(text) > MAX_TEXT:
            raise ApiError(400, "Bad Request: message is too long")
        return text, markup

    def _thread(self, chat: dict[str, Any], params: dict[str, Any]) -> int | None:
        thread = params.get("message_thread_id")
        if thread is None:
            return None
        if chat.get("is_forum") and (chat["id"], thread) not in self.messages:
            raise ApiError(400, "Bad Request: message thread not found")
        return int(thread)

    # ---- methods ------------------------------------------------------------------------------
    async def _m_getMe(self, params: dict[str, Any]) -> Any:
        return self.me

    async def _m_deleteWebhook(self, params: dict[str, Any]) -> Any:
        self.webhook = {}
        if params.get("drop_pending_updates"):
            self._updates.clear()
        return True

    async def _m_setWebhook(self, params: dict[str, Any]) -> Any:
        url = str(params.get("url") or "")
        if not url:
            return await self._m_deleteWebhook(params)
        self.webhook = {"url": url, "secret_token": params.get("secret_token")}
        return True

    async def _m_getWebhookInfo(self, params: dict[str, Any]) -> Any:
        return {
            "url": self.webhook.get("url", ""),
            "has_custom_certificate": False,
            "pending_update_count": len(self._updates),
        }

    async def _m_getFile(self, params: dict[str, Any]) -> Any:
        stored = self.files.get(str(params.get("file_id") or ""))
        if stored is None:
            raise ApiError(400, "Bad Request: invalid file_id")
        if len(stored.data) > MAX_DOWNLOAD:
            raise ApiError(400, "Bad Request: file is too big")
        return {
            "file_id": stored.file_id,
            "file_unique_id": f"U-{stored.file_id}",
            "file_size": len(stored.data),
            "file_path": stored.path,
        }

    def _media_message(
        self, params: dict[str, Any], field_name: str, limit: int
    ) -> tuple[dict[str, Any], Message, tuple[str, str, bytes]]:
        chat = self._chat(params)
        thread = self._thread(chat, params)
        upload = params.get("_files", {}).get(field_name)
        if upload is None:
            raise ApiError(400, f"Bad Request: there is no {field_name} in the request")
        if len(upload[2]) > limit:
            raise ApiError(400, "Bad Request: file is too big")
        caption = str(params.get("caption") or "")
        if utf16_len(caption) > MAX_CAPTION:
            raise ApiError(400, "Bad Request: message caption is too long")
        stored = self.store_file(upload[2], file_name=upload[0], mime_type=upload[1])
        media: dict[str, Any] = (
            {"photo": [dict(stored, width=800, height=600)]}
            if field_name == "photo"
            else {"document": stored}
        )
        message = Message(
            next(self._message_ids),
            chat,
            dict(self.me),
            caption,
            thread=thread,
            reply_markup=params.get("reply_markup") or None,
            media=media,
        )
        self.messages[(chat["id"], message.message_id)] = message
        self.uploads.append(
            Upload(field_name, chat["id"], thread, upload[0], upload[1], upload[2], caption)
        )
        return chat, message, upload

    async def _m_sendPhoto(self, params: dict[str, Any]) -> Any:
        _, message, _ = self._media_message(params, "photo", MAX_PHOTO)
        return message.as_dict()

    async def _m_sendDocument(self, params: dict[str, Any]) -> Any:
        _, message, _ = self._media_message(params, "document", MAX_UPLOAD)
        return message.as_dict()

    async def _m_setMyCommands(self, params: dict[str, Any]) -> Any:
        commands = params.get("commands")
        if not isinstance(commands, list) or len(commands) > 100:
            raise ApiError(400, "Bad Request: commands must be a list of at most 100")
        for command in commands:
            if not re.fullmatch(r"[a-z0-9_]{1,32}", str(command.get("command", ""))):
                raise ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
            if not 1 <= len(str(command.get("description", ""))) <= 256:
                raise ApiError(400, "Bad Request: BOT_COMMAND_DESCRIPTION_INVALID")
        scope = params.get("scope") or {"type": "default"}
        key = scope_key(scope if isinstance(scope, dict) else {"type": "default"})
        self.scoped_commands[key] = commands
        if key == "default":
            self.commands = commands
        return True

    async def _m_getUpdates(self, params: dict[str, Any]) -> Any:
        if self.webhook:
            raise ApiError(
                409,
                "Conflict: can't use getUpdates method while webhook is active; "
                "use deleteWebhook to delete the webhook first",
            )
        offset = int(params.get("offset") or 0)
        while self._updates and self._updates[0]["update_id"] < offset:
            self._updates.popleft()  # confirmed
        timeout = float(params.get("timeout") or 0)
        limit = int(params.get("limit") or self.poll_limit)
        deadline = time.monotonic() + timeout
        while not self._updates and not self._closing.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._new_update.clear()
            closing = asyncio.ensure_future(self._closing.wait())
            arrived = asyncio.ensure_future(self._new_update.wait())
            try:
                await asyncio.wait(
                    {closing, arrived}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                closing.cancel()
                arrived.cancel()
        return list(itertools.islice(self._updates, limit))

    async def _m_sendMessage(self, params: dict[str, Any]) -> Any:
        chat = self._chat(params)
        check_reply_markup(params.get("reply_markup"), force_reply=True)
        self._check_url_hosts(params.get("reply_markup"))
        text, markup = self._visible_text(params)
        thread = self._thread(chat, params)
        reply_to = None
        reply = params.get("reply_parameters")
        if isinstance(reply, dict):
            reply_to = self.messages.get((chat["id"], int(reply.get("message_id", 0))))
        message = Message(
            next(self._message_ids),
            chat,
            dict(self.me),
            text,
            markup,
            thread,
            params.get("reply_markup") or None,
            reply_to,
        )
        self.messages[(chat["id"], message.message_id)] = message
        return message.as_dict()

    def _check_url_hosts(self, markup: Any) -> None:
        """`refuse_local_urls`: a url button Telegram would not link is refused (module doc)."""
        if not self.refuse_local_urls or not isinstance(markup, dict):
            return
        for row in markup.get("inline_keyboard") or []:
            for button in row:
                if "url" in button and not linkable_host(str(button["url"])):
                    raise ApiError(400, "Bad Request: BUTTON_URL_INVALID")

    async def _m_sendMessageDraft(self, params: dict[str, Any]) -> Any:
        chat = self._chat(params)
        if chat.get("type") != "private":
            raise ApiError(400, "Bad Request: TEXTDRAFT_PEER_INVALID")
        if not params.get("draft_id"):
            raise ApiError(400, "Bad Request: draft_id must be non-zero")
        text = str(params.get("text") or "")
        if str(params.get("parse_mode") or "").upper() == "HTML":
            text = parse_html(text)
        if utf16_len(text) > MAX_TEXT:
            raise ApiError(400, "Bad Request: message is too long")
        self.drafts.append((chat["id"], int(params["draft_id"]), text))
        return True

    def _message(self, params: dict[str, Any]) -> Message:
        chat = self._chat(params)
        message = self.messages.get((chat["id"], int(params.get("message_id") or 0)))
        if message is None or message.sender.get("id") != BOT_ID:
            raise ApiError(400, "Bad Request: message to edit not found")
        return message

    async def _m_editMessageText(self, params: dict[str, Any]) -> Any:
        message = self._message(params)
        check_reply_markup(params.get("reply_markup"))
        self._check_url_hosts(params.get("reply_markup"))
        text, markup = self._visible_text(params)
        reply_markup = params.get("reply_markup") or None
        if (
            text == message.text
            and markup == message.markup
            and reply_markup == message.reply_markup
        ):
            raise ApiError(
                400,
                "Bad Request: message is not modified: specified new message content and reply "
                "markup are exactly the same as a current content and reply markup of the message",
            )
        message.text, message.markup, message.reply_markup = text, markup, reply_markup
        message.edits += 1
        return message.as_dict()

    async def _m_editMessageReplyMarkup(self, params: dict[str, Any]) -> Any:
        message = self._message(params)
        check_reply_markup(params.get("reply_markup"))
        reply_markup = params.get("reply_markup") or None
        if reply_markup == message.reply_markup:
            raise ApiError(400, "Bad Request: message is not modified")
        message.reply_markup = reply_markup
        message.edits += 1
        return message.as_dict()

    async def _m_sendChatAction(self, params: dict[str, Any]) -> Any:
        chat = self._chat(params)
        self._thread(chat, params)
        return True

    async def _m_answerCallbackQuery(self, params: dict[str, Any]) -> Any:
        query_id = str(params.get("callback_query_id") or "")
        if query_id not in self._open_queries:
            raise ApiError(
                400,
                "Bad Request: query is too old and response timeout expired or query ID is invalid",
            )
        if len(str(params.get("text") or "")) > 200:
            raise ApiError(400, "Bad Request: MESSAGE_TOO_LONG")
        self._open_queries.discard(query_id)
        self.answers[query_id] = params
        return True


def _reset_connection(request: web.Request) -> None:
    """Close with RST (linger 0), as a peer or middlebox dropping the connection does."""
    transport = request.transport
    assert transport is not None
    sock = transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def scope_key(scope: dict[str, Any]) -> str:
    """`default`, `chat:<id>`, `chat_member:<id>:<user>`, ... for a BotCommandScope."""
    parts = [str(scope.get("type", "default"))]
    parts += [str(scope[name]) for name in ("chat_id", "user_id") if name in scope]
    return ":".join(parts)


@dataclass(frozen=True)
class StoredFile:
    file_id: str
    path: str
    data: bytes = field(repr=False)


@dataclass(frozen=True)
class Upload:
    """A file the bot sent: `method` "photo" or "document"."""

    method: str
    chat_id: int
    thread: int | None
    name: str
    mime: str
    data: bytes = field(repr=False)
    caption: str = ""


async def _read_multipart(request: web.Request, fields: dict[str, Any]) -> dict[str, Any]:
    """Form fields into `fields`; file parts as (name, content type, bytes), read up to the
    50 MB Telegram takes in one request (past it 413, as Telegram answers)."""
    files: dict[str, tuple[str, str, bytes]] = {}
    total = 0
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):
            continue
        data = bytearray()
        while chunk := await part.read_chunk(256 * 1024):
            data += chunk
            total += len(chunk)
            if total > MAX_UPLOAD:
                raise ApiError(413, "Request Entity Too Large")
        if part.filename is not None:
            content_type = part.headers.get("Content-Type", "application/octet-stream")
            files[str(part.name)] = (part.filename, content_type, bytes(data))
        else:
            fields[str(part.name)] = data.decode("utf-8")
    return files


# The fields of an InlineKeyboardButton of which exactly one says what the button does.
_BUTTON_ACTIONS = (
    "url",
    "callback_data",
    "web_app",
    "login_url",
    "switch_inline_query",
    "switch_inline_query_current_chat",
    "switch_inline_query_chosen_chat",
    "copy_text",
    "callback_game",
    "pay",
)
_UNPARSABLE_MARKUP = "Bad Request: can't parse reply keyboard markup JSON object"


def linkable_host(url: str) -> bool:
    """Whether the real Telegram takes a url button to `url`'s host: not localhost, a bare IP
    address or a name without a dot (an internal host)."""
    host = urlsplit(url).hostname or ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return "." in host and host != "localhost" and not host.endswith(".localhost")
    return False


def check_reply_markup(markup: Any, *, force_reply: bool = False) -> None:
    """The Bot API's checks of `reply_markup` (see the module docstring); `force_reply`: the
    method takes one (sendMessage; edits take inline keyboards only)."""
    if markup is None or markup == "":
        return
    if not isinstance(markup, dict):
        raise ApiError(400, _UNPARSABLE_MARKUP)
    if "inline_keyboard" in markup:
        rows = markup["inline_keyboard"]
        if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
            raise ApiError(400, 'Bad Request: field "inline_keyboard" must be an Array')
        for row in rows:
            for button in row:
                _check_button(button)
        return
    if not force_reply:
        raise ApiError(400, "Bad Request: inline keyboard expected")
    if markup.get("force_reply") is not True:
        raise ApiError(400, _UNPARSABLE_MARKUP)
    if not isinstance(markup.get("selective", False), bool):
        raise ApiError(400, 'Bad Request: field "selective" must be of type Boolean')
    placeholder = markup.get("input_field_placeholder")
    if placeholder is not None and not (
        isinstance(placeholder, str) and 1 <= len(placeholder) <= 64
    ):
        raise ApiError(400, "Bad Request: input field placeholder is invalid")


def _check_button(button: Any) -> None:
    if not isinstance(button, dict) or not str(button.get("text") or "").strip():
        raise ApiError(
            400, "Bad Request: can't parse inline keyboard button: Text must be non-empty"
        )
    actions = [name for name in _BUTTON_ACTIONS if name in button]
    if len(actions) != 1:
        raise ApiError(
            400,
            "Bad Request: can't parse inline keyboard button: Text buttons are unallowed in the "
            "inline keyboard",
        )
    if "url" in button and not re.fullmatch(r"(?:https?|tg)://[^\s]+", str(button["url"])):
        raise ApiError(400, "Bad Request: BUTTON_URL_INVALID")
    if "callback_data" in button:
        size = len(str(button["callback_data"]).encode("utf-8"))
        if not 1 <= size <= 64:
            raise ApiError(400, "Bad Request: BUTTON_DATA_INVALID")


async def _read_params(request: web.Request) -> dict[str, Any]:
    if request.content_type == "application/json":
        body = await request.json() if request.can_read_body else {}
        return dict(body) if isinstance(body, dict) else {}
    fields: dict[str, Any] = dict(request.query)
    files: dict[str, tuple[str, str, bytes]] = {}
    if request.can_read_body and request.content_type.startswith("multipart/"):
        files = await _read_multipart(request, fields)
    elif request.can_read_body:
        form = await request.post()
        fields.update({key: value for key, value in form.items() if isinstance(value, str)})
    params: dict[str, Any] = {}
    for key, value in fields.items():
        if key in _STRING_FIELDS:
            params[key] = value
            continue
        try:
            params[key] = json.loads(value)
        except ValueError:
            params[key] = value
    if files:
        params["_files"] = files
    return params


def _entities(text: str) -> list[dict[str, Any]]:
    """The mention and command entities Telegram would attach (offsets in UTF-16 units)."""
    entities = []
    for match in re.finditer(
        r"(?<![\w@/])@[A-Za-z0-9_]{5,32}|^/[A-Za-z0-9_]+(?:@[A-Za-z0-9_]+)?", text
    ):
        kind = "bot_command" if match.group().startswith("/") else "mention"
        entities.append(
            {
                "type": kind,
                "offset": utf16_len(text[: match.start()]),
                "length": utf16_len(match.group()),
            }
        )
    return entities


@dataclass
class People:
    """Stock users for tests."""

    alice: User = field(default_factory=lambda: User(1001, "Alice", "alice"))
    bob: User = field(default_factory=lambda: User(1002, "Bob", "bob"))
    carol: User = field(default_factory=lambda: User(1003, "Carol", "carol"))
    mallory: User = field(default_factory=lambda: User(6666, "Mallory", "mallory"))
