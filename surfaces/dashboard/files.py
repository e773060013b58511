"""The files the bot sends to dashboard conversations (a `.diff` beside an approval card, the
agent's files), kept in memory for the page to download.

A file is shown in its conversation as a link to `/api/files/<id>`; the id is random and
unguessable, and the route still checks that the signed-in person sees that conversation (page.py).
What is kept is bounded in count and in bytes, the oldest file forgotten first: a link to a
forgotten file answers 404, as after a restart."""

from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass

from surfaces.base import OutgoingFile

__all__ = ["MAX_FILE_BYTES", "FileShelf", "ShelvedFile"]

MAX_FILE_BYTES = 5 * 1024 * 1024  # one file (the dashboard's max_upload_bytes)
SHELF_FILES = 200
SHELF_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ShelvedFile:
    tab: str  # the conversation it was sent to
    file: OutgoingFile


class FileShelf:
    def __init__(self, max_files: int = SHELF_FILES, max_bytes: int = SHELF_BYTES) -> None:
        self._files: OrderedDict[str, ShelvedFile] = OrderedDict()
        self._max_files = max_files
        self._max_bytes = max_bytes
        self.bytes = 0

    def keep(self, tab: str, file: OutgoingFile) -> str:
        """The id the file is downloaded by."""
        file_id = secrets.token_urlsafe(18)
        self._files[file_id] = ShelvedFile(tab, file)
        self.bytes += len(file.data)
        while self._files and (len(self._files) > self._max_files or self.bytes > self._max_bytes):
            _, oldest = self._files.popitem(last=False)
            self.bytes -= len(oldest.file.data)
        return file_id

    def get(self, file_id: str) -> ShelvedFile | None:
        return self._files.get(file_id)
