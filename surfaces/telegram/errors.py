"""python-telegram-bot's exceptions -> the surface's (`surfaces.errors`), in one table.

429 -> RateLimited; a blocked bot (403), a bad request, a migrated group or a rejected token ->
SendFailed(transient=False); network trouble (timeouts, refused connections, 5xx) ->
SendFailed(transient=True); a message that is gone -> MessageGone; a file Telegram will not
hand over (getFile: "file is too big") or take (413) -> FileRefused with a sentence. Two
refusals get classes of their own because the adapter answers them itself: "message is not
modified" is success, and HTML that Telegram cannot parse is sent again as plain text."""

from __future__ import annotations

import logging

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

from surfaces.errors import FileRefused, MessageGone, RateLimited, SendFailed, SurfaceError
from surfaces.platform_errors import ErrorMap, retry_after

__all__ = [
    "BOT_API",
    "TOO_BIG_TO_DOWNLOAD",
    "TOO_BIG_TO_UPLOAD",
    "NotModified",
    "PhotoRefused",
    "Rejected",
    "Unparsable",
    "log_polling_fault",
    "unreachable",
    "wait_out_429",
]

log = logging.getLogger(__name__)


class Rejected(SendFailed):
    """A 400: this request will never work as it is."""


class Unparsable(Rejected):
    """Telegram could not parse the HTML."""


class NotModified(Rejected):
    """The edit would not change the message."""


class PhotoRefused(Rejected):
    """Telegram would not take the picture as a photo (its dimensions, its format): it goes as
    a document instead."""


TOO_BIG_TO_DOWNLOAD = "Telegram does not let bots download files over 20 MB."
TOO_BIG_TO_UPLOAD = "Telegram does not let bots upload files over 50 MB."


def _bad_request(exc: BadRequest) -> SurfaceError:
    text = exc.message
    lowered = text.lower()
    if "not modified" in lowered:
        return NotModified(text, transient=False)
    if "can't parse entities" in lowered or "can't find end tag" in lowered:
        return Unparsable(text, transient=False)
    if "message to edit not found" in lowered or "message can't be edited" in lowered:
        return MessageGone(text)
    if "file is too big" in lowered:
        return FileRefused(TOO_BIG_TO_DOWNLOAD)
    if lowered.removeprefix("bad request: ").startswith("photo_") or "image_process" in lowered:
        return PhotoRefused(text, transient=False)
    return Rejected(f"Telegram refused the request: {text}", transient=False)


def _network(exc: NetworkError) -> SurfaceError:
    # PTB reports HTTP 413 (an upload over Telegram's limit) as a NetworkError: no retry helps.
    if "too large" in exc.message.lower():
        return FileRefused(TOO_BIG_TO_UPLOAD)
    return SendFailed(f"network error talking to Telegram: {exc.message}", transient=True)


BOT_API = ErrorMap(
    [
        (RetryAfter, lambda exc: RateLimited(retry_after(exc.retry_after))),
        (BadRequest, _bad_request),
        (
            EndPointNotFound,
            lambda exc: Rejected(f"the Bot API has no such method: {exc.message}", transient=False),
        ),
        (Forbidden, lambda exc: SendFailed(f"Telegram refused: {exc.message}", transient=False)),
        (
            ChatMigrated,
            lambda exc: SendFailed(
                f"the group is now a supergroup with id {exc.new_chat_id}", transient=False
            ),
        ),
        (
            InvalidToken,
            lambda exc: SendFailed(f"Telegram rejected the token: {exc.message}", transient=False),
        ),
        (NetworkError, _network),  # timeouts, refused connections, 5xx, 413
        (TelegramError, lambda exc: SendFailed(f"Telegram error: {exc.message}", transient=False)),
    ]
)


def unreachable(exc: Exception) -> str | None:
    """Why connecting is worth another try (network trouble), for `retry_start_up`."""
    if isinstance(exc, NetworkError):
        return f"cannot reach the Bot API ({exc.message})"
    return None


def wait_out_429(exc: Exception) -> float | bool:
    """stamina's verdict on a failed call worth a few tries (the bot-wide command menu): a 429
    is tried again after exactly the wait Telegram asked for, anything else is not."""
    if isinstance(exc, RateLimited):
        return max(exc.retry_after, 0.0)
    return False


def log_polling_fault(exc: TelegramError) -> None:
    """PTB retries polling by itself. A dropped connection or a 5xx is routine and gets one
    line; anything else (a conflict, a refusal) may need a person and keeps its traceback.
    (PTB's default logs every fault as an ERROR with a traceback.)"""
    if isinstance(exc, NetworkError) and not isinstance(exc, BadRequest):
        log.warning("telegram: polling for updates failed (%s); retrying", exc.message)
    else:
        log.error("telegram: polling for updates failed: %s", exc.message, exc_info=exc)
