"""Files on Discord: a message's attachments as the bot's `IncomingFile`s (downloaded bounded,
only from Discord's own file servers), and the bot's `OutgoingFile`s as `discord.File` uploads
within the place's upload limit.

An attachment's URL comes in the gateway's message payload, never from what a person typed; it
is still checked to be on Discord's CDN (or on the API host the surface is pointed at, in tests)
before anything is fetched. The claimed size is checked before the download, and the download
stops as soon as it passes the limit asked for.

Among replicas: an attachment's `ref` is its URL, as the gateway gave it. Discord hands a bot
no file id to fetch by, and the URL's signature is the CDN's, not the bot's credential (anyone
who sees the message gets the same link; it expires within a day, far longer than a relay
takes). `file_from_ref` takes it back only as an absolute URL on the same hosts, without user
information, over HTTPS on Discord's CDN; the download checks the host again."""

from __future__ import annotations

import io
from collections.abc import Collection

import aiohttp
import yarl

from surfaces.base import FILE_KINDS, IncomingFile, OutgoingFile
from surfaces.discord.errors import NETWORK_ERRORS
from surfaces.discord.sdk import discord
from surfaces.downloads import read_within
from surfaces.errors import FileRefused

__all__ = [
    "CDN_HOSTS",
    "UPLOAD_LIMIT",
    "download",
    "file_from_ref",
    "file_kind",
    "incoming_files",
    "too_large",
    "upload",
]

UPLOAD_LIMIT = 10 * 1024 * 1024  # Discord's default for bots; a boosted guild allows more
CDN_HOSTS = frozenset({"cdn.discordapp.com", "media.discordapp.net"})
MAX_REF_CHARS = 2000  # an attachment URL with its signature is a few hundred
DOWNLOAD_TIMEOUT = aiohttp.ClientTimeout(total=120, sock_read=30)
_CHUNK = 64 * 1024
_MIB = 1024 * 1024


def megabytes(size: int) -> str:
    return f"{size // _MIB} MB" if size % _MIB == 0 else f"{size / _MIB:.1f} MB"


def too_large(name: str, limit: int) -> str:
    return f"{name or 'The file'} is larger than {megabytes(limit)}, the most allowed here."


def file_kind(content_type: str, *, voice: bool) -> str:
    """The kind of file Discord says an attachment is (the bot checks the bytes)."""
    if voice:
        return "voice"
    major = content_type.split("/", 1)[0].lower()
    return major if major in ("image", "audio", "video") else "document"


def incoming_files(message: discord.Message, trusted: Collection[str]) -> tuple[IncomingFile, ...]:
    """The message's attachments, in the order they were sent, not downloaded yet."""
    # A voice message is a message of one audio attachment, flagged so.
    voice_message = message.flags.voice and len(message.attachments) == 1
    files: list[IncomingFile] = []
    for attachment in message.attachments:
        mime = attachment.content_type or ""
        voice = voice_message or attachment.is_voice_message()
        kind = file_kind(mime, voice=voice)
        files.append(
            _incoming(attachment.url, attachment.filename, mime, attachment.size, kind, trusted)
        )
    return tuple(files)


def file_from_ref(
    name: str, mime: str, size: int | None, kind: str, ref: str, trusted: Collection[str]
) -> IncomingFile | None:
    """The attachment another replica's `incoming_files` made, downloadable here; None for a
    ref that is not an attachment URL on `trusted` hosts (it came through the shared store)."""
    if len(ref) > MAX_REF_CHARS or not ref.isascii() or not ref.isprintable() or " " in ref:
        return None
    if kind not in FILE_KINDS or (size is not None and size < 0):
        return None
    try:
        url = yarl.URL(ref)
    except ValueError:
        return None
    if not url.is_absolute() or url.host not in trusted or url.user or url.password:
        return None
    if url.scheme != "https" and (url.host in CDN_HOSTS or url.scheme != "http"):
        return None
    return _incoming(ref, name, mime, size, kind, trusted)


def _incoming(
    url: str, name: str, mime: str, size: int | None, kind: str, trusted: Collection[str]
) -> IncomingFile:
    async def fetch(limit: int) -> bytes:
        if size is not None and size > limit:
            raise FileRefused(too_large(name, limit), limit=limit)
        return await download(url, limit, name=name, trusted=trusted)

    return IncomingFile(name=name, mime=mime, size=size, fetch=fetch, kind=kind, ref=url)


async def download(url: str, limit: int, *, name: str, trusted: Collection[str]) -> bytes:
    """The bytes at an attachment's URL, at most `limit` of them (FileRefused past it, or when
    the URL is not Discord's or Discord will not hand the file over)."""
    shown = name or "the file"
    if yarl.URL(url).host not in trusted:
        raise FileRefused(f"Discord did not give a download address for {shown}.")
    try:
        async with (
            aiohttp.ClientSession(timeout=DOWNLOAD_TIMEOUT) as session,
            session.get(url) as response,
        ):
            if response.status != 200:
                raise FileRefused(f"Discord would not hand over {shown} ({response.status}).")
            chunks = response.content.iter_chunked(_CHUNK)
            return await read_within(chunks, limit, too_large(name, limit))
    except NETWORK_ERRORS as exc:
        raise FileRefused(f"Could not download {shown} from Discord.") from exc


def upload(file: OutgoingFile) -> discord.File:
    return discord.File(io.BytesIO(file.data), filename=file.name or "file")
