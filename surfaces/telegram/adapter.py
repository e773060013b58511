"""The Telegram surface on python-telegram-bot. With `connection.py` (the Bot API connection),
`messages.py` (the paced message calls), `live.py` (replies being written), `keyboards.py`
(inline buttons, link buttons among them), `presses.py` (button presses), `asking.py` (questions
answered by the next message, with a force reply), `files.py` (downloads and uploads), `menus.py`
(the agent's commands in each chat's menu), `webhook.py` and `errors.py`, the only code that
imports `telegram`.

Receiving: long polling by default (among replicas, only the one holding the poller lease
polls: `poller.py`); webhook mode (`webhook.py`) when a webhook URL is set. PTB
hands updates over concurrently; one lane per conversation (`surfaces.lanes`) hands one chat's
messages to the bot in order while other chats go on at the same time. Button presses skip the
lanes: they must be answered at once, and the bot takes them whatever else the chat is doing.
A message's files travel with it as `IncomingFile`s the bot downloads when it decides to; an
album's parts are gathered into one message first (`albums.py`).

Sending: every call that posts or changes a message goes through the chat's pacer (see
`messages.py`); a reply being written is shown by the `LiveReply` of `open_live` (`live.py`:
a draft bubble in private chats, messages sent then edited in groups). Errors are translated by
one table (`errors.py`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

import anyio
import anyio.abc
import stamina
from telegram import BotCommand, Update
from telegram.constants import ChatAction
from telegram.ext import TypeHandler

from config.settings import TelegramSettings
from surfaces.base import (
    Choice,
    ClusterLeases,
    ConversationKey,
    Inbound,
    IncomingFile,
    LiveReply,
    MenuCommand,
    MessageRef,
    OnEvent,
    OutgoingFile,
    SurfaceCapabilities,
    UserRef,
    count_utf16,
)
from surfaces.errors import MessageGone, SurfaceError
from surfaces.lanes import Lanes
from surfaces.pacing import GroupWindow, Pacing
from surfaces.telegram.albums import Album, Albums
from surfaces.telegram.asking import TextAsks
from surfaces.telegram.connection import BotConnection
from surfaces.telegram.convert import (
    GroupGate,
    Press,
    Received,
    chat_and_thread,
    command_menu,
    press_from_update,
    received_from_update,
)
from surfaces.telegram.errors import BOT_API, log_polling_fault, wait_out_429
from surfaces.telegram.files import MAX_DOWNLOAD_BYTES, MAX_UPLOAD_BYTES, FileTransfers
from surfaces.telegram.keyboards import Keyboards
from surfaces.telegram.live import DraftChats, TelegramLive
from surfaces.telegram.markup import markdown_to_html
from surfaces.telegram.menus import AgentMenus
from surfaces.telegram.messages import MessageCalls
from surfaces.telegram.poller import PollerLease, poller_lease_name
from surfaces.telegram.presses import take_press
from surfaces.telegram.webhook import ALLOWED_UPDATES, Webhook

log = logging.getLogger(__name__)

MAX_CHARS = 4096  # UTF-16 code units, after entity parsing
MAX_MENU_TRIES = 5  # setMyCommands calls for the bot-wide menu, 429s waited out between


class TelegramSurface:
    name = "telegram"

    # ---- capabilities --------------------------------------------------------------------------
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
        album_quiet: float = 0.8,
        album_limit: float = 4.0,
    ) -> None:
        self.settings = settings
        # One message a second per chat is Telegram's rule (the chat's pacer spaces our calls'
        # arrivals); groups' 20 a minute is kept by holding live updates (optional calls) to
        # the group's window.
        self._group_interval = group_preview_interval
        self._group_budget = group_preview_budget
        self._pacing = Pacing(min_edit_interval, group_window=self._group_window)
        self.capabilities = SurfaceCapabilities(
            max_chars=MAX_CHARS,
            count=count_utf16,
            min_edit_interval=min_edit_interval,
            can_edit=True,
            message_buttons=True,
            max_upload_bytes=MAX_UPLOAD_BYTES,
            max_download_bytes=MAX_DOWNLOAD_BYTES,
            agent_menus=True,
            pacing=self._pacing,
        )
        self._poll_timeout = poll_timeout
        self._press_answer_wait = press_answer_wait
        self._shutdown_timeout = shutdown_timeout
        self._connection = BotConnection(settings, pool_size=connection_pool_size)
        self.app = self._connection.app
        self._bot = self._connection.bot
        self._webhook = Webhook(self.app, settings)
        self._messages = MessageCalls(self._bot, self._pacing)
        self._drafts = DraftChats()
        self._keyboards = Keyboards()
        self._asks = TextAsks(self._messages)
        self._files = FileTransfers(self._bot, self._messages)
        self._agent_menus = AgentMenus(self._bot)
        # Album parts wait a moment for the rest: `album_quiet` seconds without a new part,
        # `album_limit` at most (see albums.py).
        self._albums = Albums(quiet=album_quiet, limit=album_limit)
        self._lanes: Lanes[ConversationKey, Inbound | Album] = Lanes(
            self._hand_over, failure="telegram: the bot failed to take a message in %s", logger=log
        )
        self._gate = GroupGate(frozenset(settings.allowed_chats))
        self._menu: list[tuple[str, str]] = []
        self._on_event: OnEvent | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._handler_added = False
        self._leases: ClusterLeases | None = None
        self._poller: PollerLease | None = None

    def _group_window(self, chat: str) -> GroupWindow | None:
        """Groups (negative ids) allow 20 messages a minute; private chats have no window."""
        if not chat.startswith("-"):
            return None
        return GroupWindow(self._group_interval, self._group_budget)

    def render(self, markdown: str) -> str:
        return markdown_to_html(markdown)

    def command_menu(self, commands: Sequence[tuple[str, str]]) -> Any:
        """Remembered, and registered with setMyCommands once the bot is connected."""
        self._menu = command_menu(commands)
        self._gate = replace(self._gate, commands=frozenset(name for name, _ in self._menu))
        if self._tg is not None:
            self._tg.start_soon(self._register_commands)
        return None

    async def _register_commands(self) -> None:
        """The bot-wide menu; a 429 is waited out (a few times), anything else logged."""
        if not self._menu:
            return
        commands = [BotCommand(name, description) for name, description in self._menu]
        try:
            async for attempt in stamina.retry_context(
                on=wait_out_429, attempts=MAX_MENU_TRIES, timeout=None
            ):
                with attempt:
                    await BOT_API.call((await self._bot()).set_my_commands(commands))
        except SurfaceError as exc:
            log.warning("telegram: could not register the command menu: %s", exc)

    # ---- lifecycle -----------------------------------------------------------------------------
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
            self._lanes.open(tg)
            self._agent_menus.open(tg)
            try:
                await app.start()
                if self.settings.webhook_url:
                    await self._webhook.start(await self._bot())
                elif self._leases is None:
                    await self._start_polling()
                tg.start_soon(self._register_commands)
                log.info("telegram: receiving as @%s", self._connection.me.username)
                task_status.started()
                if self._leases is not None and not self.settings.webhook_url:
                    await self._poll_with_lease(self._leases)
                await anyio.sleep_forever()
            finally:
                self._tg = None  # nothing new is started from here on
                self._lanes.close()
                self._agent_menus.close()
                with anyio.CancelScope(shield=True), anyio.move_on_after(self._shutdown_timeout):
                    await self._stop_receiving()
                tg.cancel_scope.cancel()

    def set_leases(self, leases: ClusterLeases) -> None:
        """Several replicas share this bot: in long polling, only the holder of the poller
        lease polls (`poller.py`); in webhook mode every replica receives, so they are unused."""
        self._leases = leases

    async def _poll_with_lease(self, leases: ClusterLeases) -> None:
        """Until cancelled: poll while this replica holds the poller lease, else stand by."""
        name = poller_lease_name(self._connection.me.id)
        poller = PollerLease(
            leases,
            name,
            start=self._start_polling,
            stop=self._stop_polling,
            stop_timeout=self._shutdown_timeout,
        )
        self._poller = poller
        log.info("telegram: polling only while this replica holds %s", name)
        await poller.run()

    async def _start_polling(self) -> None:
        updater = self.app.updater
        assert updater is not None  # built with one, outside webhook mode
        await BOT_API.call(
            updater.start_polling(
                timeout=timedelta(seconds=self._poll_timeout),
                allowed_updates=ALLOWED_UPDATES,
                error_callback=log_polling_fault,
            )
        )

    async def _stop_polling(self) -> None:
        """PTB confirms the offset of what it fetched on the way out, so whoever polls next
        does not receive it again."""
        updater = self.app.updater
        if updater is not None and updater.running:
            await updater.stop()

    @property
    def polling(self) -> bool:
        """Whether this replica calls getUpdates now (always, in long polling without leases)."""
        if self.settings.webhook_url:
            return False
        if self._poller is not None:
            return self._poller.polling
        updater = self.app.updater
        return updater is not None and updater.running

    async def _stop_receiving(self) -> None:
        updater = self.app.updater
        if updater is not None and updater.running:
            await updater.stop()
        await self._webhook.stop()
        if self.app.running:
            await self.app.stop()  # waits for PTB's handlers, which only route

    async def close(self) -> None:
        """Close the connection, once the bot has delivered its last reply."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(self._shutdown_timeout):
            await self._files.close()
            await self._connection.close()

    @property
    def connected(self) -> bool:
        """Signed in to the Bot API (what the bot's /readyz reads; PTB retries a lost poll on
        its own, so this stays true through a network blip). A replica standing by for the
        poller lease is connected too: it is healthy, and sends whatever the bot asks of it."""
        return self._connection.signed_in

    # ---- inbound -------------------------------------------------------------------------------
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
        message = data.get("message")
        chat = str(message.get("chat", {}).get("id", "")) if isinstance(message, dict) else ""
        received = received_from_update(
            data, self._connection.me, self._gate, self._agent_menus.targets(chat)
        )
        if received is None:
            return
        self._asks.saw(received.key, received.user, received.message_id)
        files = self._incoming_files(received)
        if received.album:
            album = self._albums.add(received, files)
            if album is not None:
                self._lanes.put(received.key, album)
            return
        self._lanes.put(received.key, received.inbound(files))

    def _incoming_files(self, received: Received) -> list[IncomingFile]:
        files = [self._files.incoming(ref) for ref in received.files]
        if received.refusal is not None:
            files.append(self._files.refused(*received.refusal))
        return files

    def file_from_ref(
        self, name: str, mime: str, size: int | None, kind: str, ref: str
    ) -> IncomingFile | None:
        """A file another replica received (its `IncomingFile.ref`), or None for a ref that is
        not one of ours."""
        return self._files.file_from_ref(name, mime, size, kind, ref)

    async def _hand_over(self, item: Inbound | Album) -> None:
        assert self._on_event is not None
        if isinstance(item, Album):
            inbound = await self._albums.gathered(item)
            if inbound is None:
                return  # a group's album nobody addressed to the bot
        else:
            inbound = item
        await self._on_event(inbound)

    async def _take_press(self, press: Press) -> None:
        assert self._on_event is not None
        await take_press(
            press,
            self._keyboards.token(press.data),
            self._on_event,
            bot=self._bot,
            messages=self._messages,
            answer_wait=self._press_answer_wait,
        )

    # ---- outbound ------------------------------------------------------------------------------
    async def send(
        self,
        key: ConversationKey,
        text: str,
        *,
        formatted: bool = False,
        buttons: Sequence[Choice] = (),
    ) -> MessageRef:
        chat, thread = chat_and_thread(key)
        markup = self._keyboards.markup(buttons)
        message = await self._messages.post(
            chat, thread, text, formatted=formatted, reply_markup=markup
        )
        return MessageRef(key, str(message.message_id))

    async def edit(
        self,
        ref: MessageRef,
        text: str,
        *,
        formatted: bool = False,
        buttons: Sequence[Choice] = (),
    ) -> None:
        chat, _ = chat_and_thread(ref.key)
        await self._messages.edit_text(
            chat,
            int(ref.id),
            text,
            formatted=formatted,
            reply_markup=self._keyboards.markup(buttons),
        )

    async def send_file(self, key: ConversationKey, file: OutgoingFile) -> MessageRef:
        return await self._files.upload(key, file)

    async def agent_command_menu(
        self, key: ConversationKey, commands: Sequence[MenuCommand]
    ) -> None:
        """This chat's menu: ours and the agent's (a menu is per chat, so a forum's topics
        share the one of the agent they last reported)."""
        chat, _ = chat_and_thread(key)
        await self._agent_menus.update(chat, self._menu, commands)

    def open_live(self, key: ConversationKey) -> LiveReply:
        return TelegramLive(
            self,
            key,
            messages=self._messages,
            markup=self._keyboards.markup,
            drafts=self._drafts,
        )

    async def typing(self, key: ConversationKey) -> None:
        chat, thread = chat_and_thread(key)
        bot = await self._bot()
        await BOT_API.call(bot.send_chat_action(chat, ChatAction.TYPING, message_thread_id=thread))

    # ---- choices -------------------------------------------------------------------------------
    async def ask_choice(
        self,
        key: ConversationKey,
        prompt: str,
        choices: Sequence[Choice],
        *,
        allowed_users: Sequence[str],
    ) -> MessageRef:
        chat, thread = chat_and_thread(key)
        markup = self._keyboards.markup(choices)
        message = await self._messages.post(chat, thread, prompt, reply_markup=markup)
        return MessageRef(key, str(message.message_id))

    async def ask_text(self, key: ConversationKey, prompt: str, *, user: UserRef) -> MessageRef:
        """The prompt with a force reply for `user` (`asking.py`)."""
        return await self._asks.ask(key, prompt, user)

    async def close_choice(self, ref: MessageRef, prompt: str, outcome: str) -> None:
        chat, _ = chat_and_thread(ref.key)
        text = f"{prompt}\n\n{outcome}" if prompt else outcome
        if count_utf16(text) > MAX_CHARS:
            text = outcome
        try:
            await self._messages.edit_text(chat, int(ref.id), text)  # no reply_markup: no buttons
        except MessageGone:
            log.info("telegram: the approval message in %s is gone", ref.key)
