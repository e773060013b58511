"""Lines `line`.. of an open file, at most `limit` of them, read in chunks: what comes before the
first wanted line is only counted, and no more than `MAX_READ_BYTES` is ever kept, so a file of
one enormous line (a sparse gigabyte of NULs) costs a chunk and the cap. A reply that reaches the
cap is cut at its last whole line, or inside a line longer than the cap, and says so (`Cut`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["MAX_READ_BYTES", "Cut", "take_lines"]

# A reply's cap: JSON may write each byte as six (`\u0000`), so this is kept modest.
MAX_READ_BYTES = 1024 * 1024
_READ_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class Cut:
    """Where a reply stopped at the cap: before line `line`, or inside it (`within`)."""

    line: int
    within: bool

    def note(self) -> str:
        cap = f"{MAX_READ_BYTES // (1024 * 1024)} MiB"
        if self.within:
            return (
                f"\n[Switchboard cut this reply at {cap}, inside line {self.line}, "
                "which is longer than that: only its start is shown]"
            )
        return (
            f"[Switchboard cut this reply at {cap}: the file goes on at line {self.line}; "
            f"read on with line={self.line} and a limit]"
        )


def take_lines(fd: int, first: int, limit: int | None) -> tuple[bytes, Cut | None]:
    """Lines `first`.. (at most `limit` of them) read chunk by chunk: what comes before `first`
    is only counted, and no more than MAX_READ_BYTES is ever kept."""
    kept = bytearray()
    line = 1  # the line the next byte read belongs to
    wanted = limit
    while wanted is None or wanted > 0:
        chunk = os.read(fd, _READ_CHUNK)
        if not chunk:
            break
        start = 0
        while line < first:
            newline = chunk.find(b"\n", start)
            if newline < 0:
                break
            line, start = line + 1, newline + 1
        if line < first:
            continue
        end = len(chunk)
        if wanted is not None:
            end = start
            while wanted > 0 and end < len(chunk):
                newline = chunk.find(b"\n", end)
                if newline < 0:
                    end = len(chunk)
                    break
                end, wanted = newline + 1, wanted - 1
        room = MAX_READ_BYTES - len(kept)
        if end - start > room:
            kept += chunk[start : start + room]
            whole = kept.rfind(b"\n") + 1
            if whole:
                return bytes(kept[:whole]), Cut(first + kept.count(b"\n", 0, whole), False)
            return bytes(kept), Cut(first, True)
        kept += chunk[start:end]
    return bytes(kept), None
