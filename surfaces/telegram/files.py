"""Files both ways on Telegram: what a person attached, downloaded through the Bot API with the
bot's own token, and the bot's files uploaded as photos or documents.

Downloads: `getFile` (Telegram's cloud Bot API refuses files over 20 MB: "file is too big"),
then the file URL PTB builds from the Bot API's own `file_path` (never a URL a person gave),
read as a stream and cut off past the limit the bot asked for, so no download runs past it. The
URL carries the token: it is never logged nor put into an error.

Uploads: an image Telegram shows as a picture (JPEG, PNG, WebP within 10 MB) by `sendPhoto`,
anything else (or a picture Telegram would not take as a photo) by `sendDocument`, within
50 MB, in the conversation's topic, paced and translated like every message call.

Among replicas: a file's `ref` is `tg1:<file_id>`, all another replica needs (getFile works from
any process holding the bot token), and content refused as no agent's is `tg1x:<what it is>`, so
the person hears why from the replica that answers; `file_from_ref` reads either back, checked
like any input (a refusal only by the name of one this adapter makes)."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable

import httpx
from telegram import Bot, Message

from surfaces.base import (
    FILE_KINDS,
    ConversationKey,
    IncomingFile,
    MessageRef,
    OutgoingFile,
    count_utf16,
)
from surfaces.downloads import read_within
from surfaces.errors import FileRefused
from surfaces.telegram.convert import MAX_DOWNLOAD_BYTES, REFUSALS, FileRef, chat_and_thread
from surfaces.telegram.errors import BOT_API, TOO_BIG_TO_DOWNLOAD, PhotoRefused
from surfaces.telegram.messages import MessageCalls

__all__ = [
    "MAX_CAPTION",
    "MAX_DOWNLOAD_BYTES",
    "MAX_PHOTO_BYTES",
    "MAX_UPLOAD_BYTES",
    "FileTransfers",
    "caption_text",
]

log = logging.getLogger(__name__)

MAX_UPLOAD_BYTES = 50 * 1024 * 1024  # sendDocument through the cloud Bot API
MAX_PHOTO_BYTES = 10 * 1024 * 1024  # sendPhoto
MAX_CAPTION = 1024  # UTF-16 code units, like message text
PHOTO_TYPES = frozenset({"image/jpeg", "image/png", "image/webp"})
_CHUNK = 64 * 1024
REF_PREFIX = "tg1:"
REFUSED_PREFIX = "tg1x:"
# Bot API file ids are URL-safe base64 of well under 200 characters.
_FILE_ID = re.compile(r"[A-Za-z0-9_-]{1,256}")


def caption_text(caption: str) -> str | None:
    """A caption Telegram takes (at most 1024 UTF-16 units, an ellipsis where cut), or None."""
    caption = caption.strip()
    if not caption:
        return None
    if count_utf16(caption) <= MAX_CAPTION:
        return caption
    while count_utf16(caption) > MAX_CAPTION - 1:
        caption = caption[: -max(1, (count_utf16(caption) - MAX_CAPTION) // 2)]
    return caption + "…"


def _new_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=httpx.Timeout(30.0), follow_redirects=False)


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.3g} MB"


class FileTransfers:
    """Downloads and uploads for one bot; `close` releases the download connections."""

    def __init__(self, bot: Callable[[], Awaitable[Bot]], messages: MessageCalls) -> None:
        self._bot = bot
        self._messages = messages
        self._client: httpx.AsyncClient | None = None
        self._closed = False

    async def close(self) -> None:
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    # ---- in ----------------------------------------------------------------------------------
    def incoming(self, ref: FileRef) -> IncomingFile:
        async def fetch(limit: int) -> bytes:
            return await self.download(ref, limit)

        return IncomingFile(
            ref.name, ref.mime, ref.size, fetch, ref.kind, ref=REF_PREFIX + ref.file_id
        )

    def file_from_ref(
        self, name: str, mime: str, size: int | None, kind: str, ref: str
    ) -> IncomingFile | None:
        """The file another replica's `incoming` made, downloadable here; None for a ref that
        is not ours or not well formed (it came through the shared store)."""
        refused = ref.removeprefix(REFUSED_PREFIX)
        if refused != ref:
            sentence = REFUSALS.get(refused)
            return None if sentence is None else self.refused(refused, sentence)
        file_id = ref.removeprefix(REF_PREFIX)
        if file_id == ref or not _FILE_ID.fullmatch(file_id) or kind not in FILE_KINDS:
            return None
        if size is not None and size < 0:
            return None
        return self.incoming(FileRef(file_id, name, mime, size, kind))

    @staticmethod
    def refused(what: str, sentence: str) -> IncomingFile:
        """Content no agent can take, as a file called `what` whose download is refused with
        `sentence`: the bot says so after its own checks (the adapter knows nothing of who may
        chat, so it answers nobody itself)."""

        async def fetch(limit: int) -> bytes:
            raise FileRefused(sentence)

        ref = REFUSED_PREFIX + what if REFUSALS.get(what) == sentence else ""
        return IncomingFile(what, "", None, fetch, "document", ref=ref)

    async def download(self, ref: FileRef, limit: int) -> bytes:
        self._check_size(ref.size, limit)
        bot = await self._bot()
        file = await BOT_API.call(bot.get_file(ref.file_id))
        self._check_size(file.file_size, limit)
        if not file.file_path:
            raise FileRefused("Telegram did not say where the file is.")
        return await self._read(file.file_path, limit)

    @staticmethod
    def _check_size(size: int | None, limit: int) -> None:
        if size is None:
            return
        if size > MAX_DOWNLOAD_BYTES:
            raise FileRefused(TOO_BIG_TO_DOWNLOAD, limit=MAX_DOWNLOAD_BYTES)
        if size > limit:
            raise FileRefused(f"The file is larger than {_megabytes(limit)}.", limit=limit)

    async def _read(self, url: str, limit: int) -> bytes:
        if self._closed:  # after close (a late turn): a connection of its own, closed after
            async with _new_client() as client:
                return await self._stream(client, url, limit)
        if self._client is None:
            self._client = _new_client()
        return await self._stream(self._client, url, limit)

    async def _stream(self, client: httpx.AsyncClient, url: str, limit: int) -> bytes:
        try:
            async with client.stream("GET", url) as response:
                if response.status_code != 200:
                    log.info("telegram: a file download answered HTTP %s", response.status_code)
                    raise FileRefused(
                        f"Telegram did not hand over the file (HTTP {response.status_code})."
                    )
                refusal = f"The file is larger than {_megabytes(limit)}."
                return await read_within(response.aiter_bytes(_CHUNK), limit, refusal)
        except httpx.HTTPError as exc:
            # The exception's text may carry the URL, and with it the token: only its type.
            log.info("telegram: a file download failed (%s)", type(exc).__name__)
            raise FileRefused("The file could not be downloaded from Telegram.") from None

    # ---- out ---------------------------------------------------------------------------------
    async def upload(self, key: ConversationKey, file: OutgoingFile) -> MessageRef:
        if len(file.data) > MAX_UPLOAD_BYTES:
            raise FileRefused(
                f"{file.name} is larger than Telegram's 50 MB for bots.", limit=MAX_UPLOAD_BYTES
            )
        chat, thread = chat_and_thread(key)
        caption = caption_text(file.caption)
        bot = await self._bot()
        message: Message
        if file.mime in PHOTO_TYPES and len(file.data) <= MAX_PHOTO_BYTES:
            try:
                message = await self._messages.paced(
                    chat,
                    lambda: bot.send_photo(
                        chat,
                        file.data,
                        caption=caption,
                        filename=file.name,
                        message_thread_id=thread,
                    ),
                )
                return MessageRef(key, str(message.message_id))
            except PhotoRefused as exc:
                log.info("telegram: %s refused as a photo (%s); sent as a file", file.name, exc)
        message = await self._messages.paced(
            chat,
            lambda: bot.send_document(
                chat,
                file.data,
                caption=caption,
                filename=file.name or "file",
                message_thread_id=thread,
            ),
        )
        return MessageRef(key, str(message.message_id))
