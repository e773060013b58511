"""The Telegram surface on python-telegram-bot: the only module that imports `telegram`.

Receiving: long polling by default; webhook mode (our own aiohttp server, the secret header
checked before anything is parsed) when a webhook URL is set. PTB hands updates over
concurrently; we keep one ordered queue per conversation, so one chat's messages reach the bot
in order while other chats go on at the same time. Button presses skip the queue: they must be
answered at once, and the bot takes them whatever else the chat is doing.

Streaming previews (`preview`), one design for both kinds of chat, since capabilities are per
surface: in private chats a `sendMessageDraft` bubble, finished by the bot's ordinary `send`; in
groups (and private chats where drafts are refused) a live message made with `sendMessage` and
then edited, which the final `send` for that conversation takes over (it edits the live message
into the first part of the answer instead of posting a second copy). Groups allow 20 messages a
minute, so group previews are spaced at least `group_preview_interval` apart and stop while the
minute's budget is nearly spent; a preview that has to wait is shown later by a background
flush with the newest text, never dropped.

Pacing: the bot spaces each chat's calls by `min_edit_interval` from their starts; Telegram
counts arrivals, so each chat's next message call also waits that long after the previous one
finished (`_message_call`), which keeps uneven latency from squeezing two calls together.

Errors are translated here: 429 -> RateLimited, a blocked bot (403) or a bad request ->
SendFailed(transient=False), network trouble -> SendFailed(transient=True), a message that is
gone -> MessageGone. "Message is not modified" is success; HTML that Telegram cannot parse is
sent again as plain text."""

from __future__ import annotations

import hmac
import itertools
import json
import logging
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, TypeVar
from urllib.parse import urlsplit

import anyio
import anyio.abc
from aiohttp import web
from telegram import (
    BotCommand,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    Message,
    ReplyParameters,
    Update,
)
from telegram.constants import ChatAction, ParseMode
from telegram.error import (
    BadRequest,
    ChatMigrated,
    EndPointNotFound,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
)
from telegram.ext import Application, ApplicationBuilder, TypeHandler

from config import ConfigError
from config.settings import TelegramSettings
from surfaces.base import (
    Choice,
    ChoiceAnswer,
    ConversationKey,
    Inbound,
    MessageRef,
    OnEvent,
    SurfaceCapabilities,
    count_utf16,
)
from surfaces.errors import MessageGone, RateLimited, SendFailed, SurfaceError
from surfaces.pacing import GroupWindow, Pacing
from surfaces.telegram.convert import (
    BotIdentity,
    GroupGate,
    Press,
    chat_and_thread,
    choice_rows,
    command_menu,
    fits_callback_data,
    html_to_plain,
    inbound_from_update,
    is_private,
    markdown_to_html,
    press_from_update,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_CHARS = 4096  # UTF-16 code units, after entity parsing
ALLOWED_UPDATES = ["message", "callback_query"]
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
_NO_PREVIEWS = LinkPreviewOptions(is_disabled=True)


class _Rejected(SendFailed):
    """A 400: this request will never work as it is."""


class _Unparsable(_Rejected):
    """Telegram could not parse the HTML."""


class _NotModified(_Rejected):
    """The edit would not change the message."""


def _seconds(value: int | float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _log_polling_fault(exc: TelegramError) -> None:
    """PTB retries polling by itself. A dropped connection or a 5xx is routine and gets one
    line; anything else (a conflict, a refusal) may need a person and keeps its traceback.
    (PTB's default logs every fault as an ERROR with a traceback.)"""
    if isinstance(exc, NetworkError) and not isinstance(exc, BadRequest):
        log.warning("telegram: polling for updates failed (%s); retrying", exc.message)
    else:
        log.error("telegram: polling for updates failed: %s", exc.message, exc_info=exc)


async def _api(call: Awaitable[T]) -> T:
    """Await one Bot API call, translating PTB's exceptions to the surface's."""
    try:
        return await call
    except RetryAfter as exc:
        raise RateLimited(_seconds(exc.retry_after)) from exc
    except BadRequest as exc:
        text = exc.message
        lowered = text.lower()
        if "not modified" in lowered:
            raise _NotModified(text, transient=False) from exc
        if "can't parse entities" in lowered or "can't find end tag" in lowered:
            raise _Unparsable(text, transient=False) from exc
        if "message to edit not found" in lowered or "message can't be edited" in lowered:
            raise MessageGone(text) from exc
        raise _Rejected(f"Telegram refused the request: {text}", transient=False) from exc
    except EndPointNotFound as exc:
        raise _Rejected(f"the Bot API has no such method: {exc.message}", transient=False) from exc
    except Forbidden as exc:
        raise SendFailed(f"Telegram refused: {exc.message}", transient=False) from exc
    except ChatMigrated as exc:
        raise SendFailed(
            f"the group is now a supergroup with id {exc.new_chat_id}", transient=False
        ) from exc
    except InvalidToken as exc:
        raise SendFailed(f"Telegram rejected the token: {exc.message}", transient=False) from exc
    except NetworkError as exc:  # timeouts, refused connections, 5xx
        raise SendFailed(
            f"network error talking to Telegram: {exc.message}", transient=True
        ) from exc
    except TelegramError as exc:
        raise SendFailed(f"Telegram error: {exc.message}", transient=False) from exc


@dataclass
class _Live:
    """The live preview message of one conversation (groups, or chats without drafts)."""

    message_id: int | None = None
    shown: str = ""
    pending: str | None = None  # newest preview text not shown yet
    flush_scheduled: bool = False
    closed: bool = False  # taken over by a final send
    lock: anyio.Lock = field(default_factory=anyio.Lock)


class TelegramSurface:
    name = "telegram"

    def __init__(
        self,
        settings: TelegramSettings,
        *,
        min_edit_interval: float = 1.0,
        group_preview_interval: float = 3.0,
        group_preview_budget: int = 17,
        poll_timeout: float = 10.0,
        press_answer_wait: float = 1.0,
        shutdown_timeout: float = 5.0,
        connection_pool_size: int = 32,
    ) -> None:
        self.settings = settings
        # One message a second per chat is Telegram's rule (the chat's pacer spaces the bot's
        # turns and our calls' arrivals); groups' 20 a minute is kept by spacing previews (the
        # group's window).
        self._group_interval = group_preview_interval
        self._group_budget = group_preview_budget
        self._pacing = Pacing(min_edit_interval, group_window=self._group_window)
        self.capabilities = SurfaceCapabilities(
            max_chars=MAX_CHARS,
            count=count_utf16,
            min_edit_interval=min_edit_interval,
            can_edit=True,
            drafts=True,
            buttons=True,
            threads=True,
            pacing=self._pacing,
        )
        self._poll_timeout = poll_timeout
        self._press_answer_wait = press_answer_wait
        self._shutdown_timeout = shutdown_timeout
        self.app: Any = self._build_application(settings, connection_pool_size)
        self._gate = GroupGate(frozenset(settings.allowed_chats))
        self._me = BotIdentity(0, "")
        self._menu: list[tuple[str, str]] = []
        self._on_event: OnEvent | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._webhook: web.AppRunner | None = None
        self._queues: dict[ConversationKey, deque[Inbound]] = {}
        self._lives: dict[ConversationKey, _Live] = {}
        self._no_drafts: set[int] = set()
        self._draft_ids: dict[ConversationKey, int] = {}
        self._draft_counter = itertools.count(1)
        self._aliases: OrderedDict[str, str] = OrderedDict()  # callback_data -> long token
        self._alias_counter = itertools.count(1)
        self._ready = False
        self._connect_lock = anyio.Lock()
        self._handler_added = False

    @staticmethod
    def _build_application(settings: TelegramSettings, pool_size: int) -> Any:
        # httpcore scans every pooled connection on each request, so a pool much larger than
        # the requests actually in flight costs CPU for nothing; requests beyond it queue.
        builder = (
            ApplicationBuilder()
            .token(settings.token)
            .concurrent_updates(True)
            .connection_pool_size(pool_size)
            .pool_timeout(30.0)
        )
        if settings.api_url:
            base = settings.api_url.rstrip("/")
            builder = builder.base_url(base + "/bot").base_file_url(base + "/file/bot")
        if settings.webhook_url:
            builder = builder.updater(None)
        app: Application[Any, Any, Any, Any, Any, Any] = builder.build()
        return app

    # ---- connecting ---------------------------------------------------------------------------
    async def _bot(self) -> Any:
        """The connected Bot. Sending may start before `run` (the bot re-delivers replies a
        restart cut off before surfaces receive) and goes on after it (partial output at
        shutdown), so the connection is opened on first use and closed by `close`."""
        if not self._ready:
            async with self._connect_lock:
                if not self._ready:
                    await self._initialize()
                    bot = self.app.bot
                    self._me = BotIdentity(bot.id, bot.username or "")
                    self._ready = True
        return self.app.bot

    async def _initialize(self) -> None:
        """getMe, retried a few times over network trouble; a rejected token is a setting error."""
        for attempt in range(4):
            try:
                await self.app.initialize()
                return
            except InvalidToken as exc:
                raise ConfigError(
                    "SWITCHBOARD_TELEGRAM__TOKEN", f"Telegram rejected the token ({exc.message})"
                ) from exc
            except NetworkError as exc:
                if attempt == 3:
                    raise SendFailed(
                        f"cannot reach the Telegram Bot API: {exc.message}", transient=True
                    ) from exc
                log.warning("telegram: cannot reach the Bot API (%s); retrying", exc.message)
                await anyio.sleep(2**attempt)

    async def close(self) -> None:
        """Close the connection, once the bot has delivered its last reply."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(self._shutdown_timeout):
            async with self._connect_lock:
                if self.app.running:
                    await self.app.stop()
                if self._ready:
                    self._ready = False
                    await self.app.shutdown()

    # ---- receiving ----------------------------------------------------------------------------
    async def run(
        self,
        on_event: OnEvent,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Receive until cancelled; then stop receiving within `shutdown_timeout` seconds.
        Sending keeps working until `close`."""
        self._on_event = on_event
        app = self.app
        if not self._handler_added:
            app.add_handler(TypeHandler(Update, self._on_update))
            self._handler_added = True
        await self._bot()
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                await app.start()
                if self.settings.webhook_url:
                    await self._start_webhook()
                else:
                    await app.updater.start_polling(
                        timeout=self._poll_timeout,
                        allowed_updates=ALLOWED_UPDATES,
                        error_callback=_log_polling_fault,
                    )
                tg.start_soon(self._register_commands)
                log.info("telegram: receiving as @%s", self._me.username)
                task_status.started()
                await anyio.sleep_forever()
            finally:
                self._tg = None  # nothing new is started from here on
                with anyio.CancelScope(shield=True), anyio.move_on_after(self._shutdown_timeout):
                    await self._stop_receiving()
                tg.cancel_scope.cancel()

    async def _stop_receiving(self) -> None:
        updater = self.app.updater
        if updater is not None and updater.running:
            await updater.stop()
        if self._webhook is not None:
            await self._webhook.cleanup()
            self._webhook = None
        if self.app.running:
            await self.app.stop()  # waits for PTB's handlers, which only route

    async def _start_webhook(self) -> None:
        settings = self.settings
        server = web.Application()
        server.router.add_post(urlsplit(settings.webhook_url).path or "/", self._on_webhook)
        runner = web.AppRunner(server, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        self._webhook = runner
        await web.TCPSite(runner, settings.webhook_listen, settings.webhook_port).start()
        await _api(
            (await self._bot()).set_webhook(
                settings.webhook_url,
                secret_token=settings.webhook_secret,
                allowed_updates=ALLOWED_UPDATES,
            )
        )
        log.info(
            "telegram: webhook %s, listening on %s:%d",
            settings.webhook_url,
            settings.webhook_listen,
            settings.webhook_port,
        )

    async def _on_webhook(self, request: web.Request) -> web.Response:
        """Telegram posts one update per request; only with our secret is anything read."""
        secret = request.headers.get(SECRET_HEADER)
        if secret is None:
            return web.Response(status=401)
        if not hmac.compare_digest(secret.encode(), self.settings.webhook_secret.encode()):
            return web.Response(status=403)
        try:
            data = json.loads(await request.read())
        except ValueError:
            return web.Response(status=400)
        if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
            return web.Response(status=400)
        await self.app.update_queue.put(Update.de_json(data, self.app.bot))
        return web.Response(status=200)

    async def _on_update(self, update: Update, context: Any) -> None:
        """PTB's handler. Runs concurrently for all updates, so it only routes, without
        awaiting: the order per conversation is the order PTB started the handlers in."""
        tg = self._tg
        if tg is None:
            return
        data = update.to_dict()
        press = press_from_update(data, self._gate)
        if press is not None:
            tg.start_soon(self._take_press, press)
            return
        inbound = inbound_from_update(data, self._me, self._gate)
        if inbound is None:
            return
        queue = self._queues.get(inbound.key)
        if queue is not None:
            queue.append(inbound)
            return
        self._queues[inbound.key] = deque([inbound])
        tg.start_soon(self._drain, inbound.key)

    async def _drain(self, key: ConversationKey) -> None:
        """Hand one conversation's messages to the bot in order, each once it accepted the last."""
        queue = self._queues[key]
        try:
            while queue:
                assert self._on_event is not None
                try:
                    await self._on_event(queue[0])
                except Exception:
                    log.exception("telegram: the bot failed to take a message in %s", key)
                queue.popleft()
        finally:
            if self._queues.get(key) is queue:
                del self._queues[key]

    async def _take_press(self, press: Press) -> None:
        """A button press: the bot decides; the query is answered as soon as it has (or after
        `press_answer_wait` seconds, whichever is first), with its notice if it gave one."""
        answered = False

        async def answer(text: str | None) -> bool:
            nonlocal answered
            if answered:
                return False
            answered = True
            with anyio.CancelScope(shield=True):
                try:
                    await _api(
                        (await self._bot()).answer_callback_query(
                            press.query_id,
                            text=text[:200] if text else None,
                            show_alert=True if text else None,
                        )
                    )
                except SurfaceError as exc:
                    log.info("telegram: could not answer a button press: %s", exc)
            return True

        async def notify(text: str) -> None:
            if not await answer(text):  # too late for the query: a reply to the buttons
                chat, thread = chat_and_thread(press.key)
                await self._post(chat, thread, text, reply_to=press.message_id)

        token = self._aliases.get(press.data, press.data)
        event = ChoiceAnswer(press.key, press.user, token, press.event_id, notify)
        async with anyio.create_task_group() as tg:

            async def answer_soon() -> None:
                await anyio.sleep(self._press_answer_wait)
                await answer(None)

            tg.start_soon(answer_soon)
            try:
                assert self._on_event is not None
                await self._on_event(event)
            except Exception:
                log.exception("telegram: the bot failed to take a button press")
            finally:
                tg.cancel_scope.cancel()
        await answer(None)

    # ---- sending ------------------------------------------------------------------------------
    def render(self, markdown: str) -> str:
        return markdown_to_html(markdown)

    async def _message_call(self, chat: int, call: Callable[[], Awaitable[T]]) -> T:
        """One call that posts or changes a message in `chat`, started no sooner than
        `min_edit_interval` after the previous one in that chat *finished*. The bot's pacer
        spaces the starts of calls, but Telegram counts arrivals, and a call that waited longer
        on the way (a queue for connections, a busy event loop) would otherwise arrive too close
        behind the one before. Only a finished call is known to have arrived."""
        async with self._pacing.call(str(chat)):  # which records a 429 and the group's call
            return await _api(call())

    def _group_window(self, chat: str) -> GroupWindow | None:
        """Groups (negative ids) allow 20 messages a minute; private chats have no window."""
        if not chat.startswith("-"):
            return None
        return GroupWindow(self._group_interval, self._group_budget)

    async def _post(
        self,
        chat: int,
        thread: int | None,
        text: str,
        *,
        formatted: bool = False,
        reply_markup: InlineKeyboardMarkup | None = None,
        reply_to: int | None = None,
    ) -> Message:
        bot = await self._bot()
        options: dict[str, Any] = {
            "message_thread_id": thread,
            "reply_markup": reply_markup,
            "link_preview_options": _NO_PREVIEWS,
        }
        if reply_to is not None:
            options["reply_parameters"] = ReplyParameters(
                reply_to, allow_sending_without_reply=True
            )
        if formatted:
            try:
                return await self._message_call(
                    chat,
                    lambda: bot.send_message(chat, text, parse_mode=ParseMode.HTML, **options),
                )
            except _Unparsable as exc:
                log.info("telegram: HTML refused (%s); sending plain text", exc.reason)
                text = html_to_plain(text)
        plain = text
        message: Message = await self._message_call(
            chat, lambda: bot.send_message(chat, plain, **options)
        )
        return message

    async def _edit_text(
        self, chat: int, message_id: int, text: str, *, formatted: bool = False
    ) -> None:
        """Edit a message's text (dropping its buttons); an edit that changes nothing is fine."""
        bot = await self._bot()
        try:
            if formatted:
                try:
                    await self._message_call(
                        chat,
                        lambda: bot.edit_message_text(
                            text,
                            chat,
                            message_id,
                            parse_mode=ParseMode.HTML,
                            link_preview_options=_NO_PREVIEWS,
                        ),
                    )
                    return
                except _Unparsable as exc:
                    log.info("telegram: HTML refused (%s); editing to plain text", exc.reason)
                    text = html_to_plain(text)
            plain = text
            await self._message_call(
                chat,
                lambda: bot.edit_message_text(
                    plain, chat, message_id, link_preview_options=_NO_PREVIEWS
                ),
            )
        except _NotModified:
            return

    async def send(self, key: ConversationKey, text: str, *, formatted: bool = False) -> MessageRef:
        chat, thread = chat_and_thread(key)
        self._draft_ids.pop(key, None)  # the next reply starts a fresh draft
        live = self._lives.get(key)
        if live is not None:
            adopted = await self._adopt(key, live, text, formatted=formatted)
            if adopted is not None:
                return MessageRef(key, str(adopted))
        message = await self._post(chat, thread, text, formatted=formatted)
        return MessageRef(key, str(message.message_id))

    async def _adopt(
        self, key: ConversationKey, live: _Live, text: str, *, formatted: bool
    ) -> int | None:
        """Turn the conversation's live preview message into this message, rather than leave a
        stale copy above it. Returns its id, or None if there was none (or it is gone)."""
        chat, _ = chat_and_thread(key)
        async with live.lock:
            live.closed, live.pending = True, None
            message_id = live.message_id
            if message_id is not None:
                try:
                    await self._edit_text(chat, message_id, text, formatted=formatted)
                except MessageGone:
                    message_id = None
                except BaseException:
                    live.closed = False  # the bot will try this send again: adopt then
                    raise
            if self._lives.get(key) is live:
                del self._lives[key]
        return message_id

    async def edit(self, ref: MessageRef, text: str, *, formatted: bool = False) -> None:
        chat, _ = chat_and_thread(ref.key)
        await self._edit_text(chat, int(ref.id), text, formatted=formatted)

    async def preview(self, key: ConversationKey, text: str) -> None:
        chat, thread = chat_and_thread(key)
        if is_private(key) and chat not in self._no_drafts:
            draft_id = self._draft_ids.get(key)
            if draft_id is None:
                draft_id = self._draft_ids[key] = next(self._draft_counter)
            bot = await self._bot()
            try:
                await self._message_call(
                    chat,
                    lambda: bot.send_message_draft(chat, draft_id, text, message_thread_id=thread),
                )
                return
            except _Rejected as exc:
                log.warning(
                    "telegram: drafts refused in chat %s (%s); previews as messages", chat, exc
                )
                self._no_drafts.add(chat)
        await self._live_preview(key, text)

    async def _live_preview(self, key: ConversationKey, text: str) -> None:
        live = self._lives.get(key)
        if live is None:
            live = self._lives[key] = _Live()
        live.pending = text
        if live.flush_scheduled:
            return  # the scheduled flush shows the newest text
        wait = self._preview_wait(key)
        if wait > 0 and self._tg is not None:
            live.flush_scheduled = True
            self._tg.start_soon(self._flush_later, key, live, wait)
            return
        await self._flush(key, live)

    def _preview_wait(self, key: ConversationKey) -> float:
        if is_private(key):
            return 0.0  # the bot's pacer is enough
        return self._pacing.preview_wait(key.chat)

    async def _flush(self, key: ConversationKey, live: _Live) -> None:
        chat, thread = chat_and_thread(key)
        async with live.lock:
            text, live.pending = live.pending, None
            if live.closed or text is None or text == live.shown:
                return
            try:
                if live.message_id is None:
                    live.message_id = (await self._post(chat, thread, text)).message_id
                else:
                    await self._edit_text(chat, live.message_id, text)
            except MessageGone:
                live.message_id, live.shown = None, ""
                raise
            except BaseException:
                if live.pending is None:
                    live.pending = text  # still to show
                raise
            live.shown = text

    async def _flush_later(self, key: ConversationKey, live: _Live, wait: float) -> None:
        try:
            while not live.closed:
                await anyio.sleep(wait)
                wait = self._preview_wait(key)
                if live.closed or wait > 0:
                    continue
                try:
                    await self._flush(key, live)
                    return
                except RateLimited as exc:  # the chat's gate holds every call back meanwhile
                    wait = exc.retry_after
                except SurfaceError as exc:
                    log.info("telegram: a live preview in %s failed: %s", key, exc)
                    wait = self._group_interval
                except Exception:  # unmapped: this chat's previews stop, the adapter goes on
                    log.exception("telegram: a live preview in %s failed unexpectedly", key)
                    return
        finally:
            live.flush_scheduled = False

    async def ask_choice(
        self,
        key: ConversationKey,
        prompt: str,
        choices: Sequence[Choice],
        *,
        allowed_users: Sequence[str],
    ) -> MessageRef:
        chat, thread = chat_and_thread(key)
        buttons = [
            InlineKeyboardButton(choice.label, callback_data=self._callback_data(choice.token))
            for choice in choices
        ]
        rows = choice_rows([choice.label for choice in choices])
        markup = InlineKeyboardMarkup([[buttons[index] for index in row] for row in rows])
        message = await self._post(chat, thread, prompt, reply_markup=markup)
        return MessageRef(key, str(message.message_id))

    def _callback_data(self, token: str) -> str:
        """The token itself when it fits Telegram's 64 bytes, else a short alias of it."""
        if fits_callback_data(token):
            return token
        alias = f"~{next(self._alias_counter)}"
        self._aliases[alias] = token
        while len(self._aliases) > 1000:
            self._aliases.popitem(last=False)
        return alias

    async def close_choice(self, ref: MessageRef, prompt: str, outcome: str) -> None:
        chat, _ = chat_and_thread(ref.key)
        message_id = int(ref.id)
        text = f"{prompt}\n\n{outcome}" if prompt else outcome
        if count_utf16(text) > MAX_CHARS:
            text = outcome
        try:
            await self._edit_text(chat, message_id, text)  # no reply_markup: buttons go
        except MessageGone:
            log.info("telegram: the approval message in %s is gone", ref.key)

    async def typing(self, key: ConversationKey) -> None:
        chat, thread = chat_and_thread(key)
        bot = await self._bot()
        await _api(bot.send_chat_action(chat, ChatAction.TYPING, message_thread_id=thread))

    def command_menu(self, commands: Sequence[tuple[str, str]]) -> Any:
        """Remembered, and registered with setMyCommands once the bot is connected."""
        self._menu = command_menu(commands)
        self._gate = replace(self._gate, commands=frozenset(name for name, _ in self._menu))
        if self._tg is not None:
            self._tg.start_soon(self._register_commands)
        return None

    async def _register_commands(self) -> None:
        if not self._menu:
            return
        try:
            await _api(
                (await self._bot()).set_my_commands(
                    [BotCommand(name, description) for name, description in self._menu]
                )
            )
        except SurfaceError as exc:
            log.warning("telegram: could not register the command menu: %s", exc)
