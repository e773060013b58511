"""Files on Discord: a message's attachments as the bot's `IncomingFile`s (downloaded bounded,
only from Discord's own file servers), and the bot's `OutgoingFile`s as `discord.File` uploads
within the place's upload limit.

An attachment's URL comes in the gateway's message payload, never from what a person typed; it
is still checked to be on Discord's CDN (or on the API host the surface is pointed at, in tests)
before anything is fetched. The claimed size is checked before the download, and the download
stops as soon as it passes the limit asked for."""

from __future__ import annotations

import io
from collections.abc import Collection

import aiohttp
import yarl

from surfaces.base import IncomingFile, OutgoingFile
from surfaces.discord.errors import NETWORK_ERRORS
from surfaces.discord.sdk import discord
from surfaces.downloads import read_within
from surfaces.errors import FileRefused

__all__ = [
    "CDN_HOSTS",
    "UPLOAD_LIMIT",
    "download",
    "file_kind",
    "incoming_files",
    "too_large",
    "upload",
]

UPLOAD_LIMIT = 10 * 1024 * 1024  # Discord's default for bots; a boosted guild allows more
CDN_HOSTS = frozenset({"cdn.discordapp.com", "media.discordapp.net"})
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

        async def fetch(
            limit: int,
            url: str = attachment.url,
            name: str = attachment.filename,
            size: int = attachment.size,
        ) -> bytes:
            if size > limit:
                raise FileRefused(too_large(name, limit), limit=limit)
            return await download(url, limit, name=name, trusted=trusted)

        files.append(
            IncomingFile(
                name=attachment.filename,
                mime=mime,
                size=attachment.size,
                fetch=fetch,
                kind=file_kind(mime, voice=voice),
            )
        )
    return tuple(files)


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
