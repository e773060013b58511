"""Albums: Telegram delivers the parts of a media group (up to 10 photos or files sent
together) as separate updates with one `media_group_id`; the bot gets them as ONE message.

The first part files a placeholder in the conversation's lane, so whatever the person sends
after the album stays behind it. When the placeholder reaches the head of the lane it waits
until no part has arrived for `quiet` seconds (never longer than `limit` seconds after the first
part, and not at all once 10 parts are in), then becomes one `Inbound`: every part's files in
order, the captions joined. In a group the album is the bot's when any part is addressed to it
(the caption that mentions the bot is usually on one part only); otherwise it is dropped. A part
that arrives after its album was handed over starts a new one."""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from surfaces.base import Inbound, IncomingFile
from surfaces.telegram.convert import Received

__all__ = ["MAX_PARTS", "Album", "Albums"]

MAX_PARTS = 10  # Telegram's largest media group


@dataclass
class Album:
    """The parts of one media group gathered so far."""

    first: Received
    started: float
    last: float
    texts: list[str] = field(default_factory=list)
    files: list[IncomingFile] = field(default_factory=list)
    parts: int = 0
    addressed: bool = False

    def add(self, part: Received, files: list[IncomingFile], now: float) -> None:
        self.parts += 1
        self.last = now
        self.addressed = self.addressed or part.addressed
        if part.text:
            self.texts.append(part.text)
        self.files.extend(files)

    def inbound(self) -> Inbound | None:
        """The album as one message, or None when nobody addressed it to the bot."""
        if not self.addressed:
            return None
        return Inbound(
            self.first.key,
            self.first.user,
            "\n\n".join(self.texts),
            f"{self.first.event_id}+album",
            files=tuple(self.files),
        )


class Albums:
    """The albums being gathered, by (chat, media group id)."""

    def __init__(self, *, quiet: float, limit: float) -> None:
        self._quiet = quiet
        self._limit = limit
        self._open: dict[tuple[str, str], Album] = {}

    def add(self, part: Received, files: list[IncomingFile]) -> Album | None:
        """File a part; returns the album when this part started it (to file in the lane)."""
        now = anyio.current_time()
        slot = (part.key.chat, part.album)
        album = self._open.get(slot)
        started = album is None
        if album is None:
            album = self._open[slot] = Album(part, now, now)
        album.add(part, files, now)
        return album if started else None

    async def gathered(self, album: Album) -> Inbound | None:
        """Wait for the album's last part (bounded, see the module docstring), then close it."""
        while album.parts < MAX_PARTS:
            now = anyio.current_time()
            wait = min(album.last + self._quiet, album.started + self._limit) - now
            if wait <= 0:
                break
            await anyio.sleep(wait)
        slot = (album.first.key.chat, album.first.album)
        if self._open.get(slot) is album:
            del self._open[slot]
        return album.inbound()
