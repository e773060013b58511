"""Files both ways on Slack: what a person shared, fetched through the Web API with the bot token,
and the agent's files uploaded with Slack's file upload v2.

Fetching never trusts the event: the file's id goes to `files.info`, and only the
`url_private_download` Slack answers there is fetched, with `Authorization: Bearer <bot token>`,
and only on Slack's file host (`WebApi.file_origins`), streamed and cut off past the limit. A file
Slack hides (past the storage limit), has deleted, or that lives elsewhere is refused with a
sentence. Uploading (`files.getUploadURLExternal`, the POST, `files.completeUploadExternal` into
the conversation's thread) runs as one call in the channel's pacer; Slack shows images itself.

Among replicas: a file's `ref` is its Slack file id, what `files.info` needs (never its
`url_private`: that is fetched with the token, by whichever replica downloads it); `file_from_ref`
checks the id's shape and fetches the same way."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from surfaces.base import FILE_KINDS, ConversationKey, IncomingFile, OutgoingFile
from surfaces.errors import FileRefused
from surfaces.slack.convert import SlackFile, unavailable_reason
from surfaces.slack.errors import Refused
from surfaces.slack.web_api import WebApi

__all__ = ["MAX_UPLOAD_BYTES", "file_from_ref", "incoming", "upload"]

log = logging.getLogger(__name__)

MAX_UPLOAD_BYTES = 1_000_000_000  # Slack takes files up to 1 GB
# What files.info / the upload answer for a file Slack will not hand over or take.
_REFUSALS = {
    "file_not_found": "Slack says the file no longer exists.",
    "file_deleted": "This file was deleted from Slack.",
    "access_denied": "Slack does not let the bot open this file.",
    "file_too_large": "Slack refused the file as too large.",
    "file_uploads_disabled": "File uploads are turned off in this Slack workspace.",
    "file_uploads_except_images_disabled": "This Slack workspace only takes images.",
}
# Slack's file ids: an F and upper-case letters and digits.
_FILE_ID = re.compile(r"F[A-Z0-9]{1,63}")


def incoming(api: WebApi, file: SlackFile) -> IncomingFile:
    """The bot's view of a shared file; `fetch(limit)` downloads it the safe way."""

    async def fetch(limit: int) -> bytes:
        return await _fetch(api, file, limit)

    return IncomingFile(file.name, file.mime, file.size, fetch, kind=file.kind, ref=file.id)


def file_from_ref(
    api: WebApi, name: str, mime: str, size: int | None, kind: str, ref: str
) -> IncomingFile | None:
    """The file another replica's `incoming` made, fetched through this replica's `api`; None
    for a ref that is not a Slack file id (it came through the shared store)."""
    if not _FILE_ID.fullmatch(ref) or kind not in FILE_KINDS or (size is not None and size < 0):
        return None
    return incoming(api, SlackFile(ref, name, mime, size))


async def _fetch(api: WebApi, file: SlackFile, limit: int) -> bytes:
    if file.unavailable:
        raise FileRefused(file.unavailable)
    try:
        response = await api.unpaced(api.web.files_info, file=file.id)
    except Refused as exc:
        raise FileRefused(_refusal(exc.error)) from exc
    info: Any = response.get("file")
    if not isinstance(info, dict):
        raise FileRefused("Slack did not describe the file.")
    reason = unavailable_reason(info)
    if reason:
        raise FileRefused(reason)
    size = info.get("size")
    if isinstance(size, int) and size > limit:
        raise FileRefused(
            f"The file is larger than the {limit / 1_000_000:g} MB the bot takes.", limit=limit
        )
    url = info.get("url_private_download") or info.get("url_private")
    if not isinstance(url, str) or not url:
        raise FileRefused("Slack gave no way to download the file.")
    return await api.download(url, limit)


async def upload(api: WebApi, key: ConversationKey, file: OutgoingFile) -> str:
    """Upload `file` into the conversation's thread; the id of the file Slack made."""
    call: Callable[..., Awaitable[Any]] = api.web.files_upload_v2
    try:
        response = await api.call(
            key.chat,
            call,
            channel=key.chat,
            thread_ts=key.thread or None,
            filename=file.name,
            title=file.name,
            content=file.data,
            initial_comment=file.caption or None,
        )
    except Refused as exc:
        if exc.error in _REFUSALS:
            raise FileRefused(_REFUSALS[exc.error]) from exc
        raise
    uploaded = response.get("file")
    return str(uploaded.get("id") or "") if isinstance(uploaded, dict) else ""


def _refusal(error: str) -> str:
    return _REFUSALS.get(error, f"Slack would not hand over the file ({error}).")
