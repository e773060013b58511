"""A download read no further than the bot asked: the one loop every adapter's `fetch` uses."""

from __future__ import annotations

from collections.abc import AsyncIterable

from surfaces.errors import FileRefused


async def read_within(chunks: AsyncIterable[bytes], limit: int, refusal: str) -> bytes:
    """The bytes of `chunks`, stopping as soon as they pass `limit` bytes: then
    `FileRefused(refusal)` (a platform's claimed size may be wrong, or missing)."""
    data = bytearray()
    async for chunk in chunks:
        data += chunk
        if len(data) > limit:
            raise FileRefused(refusal, limit=limit)
    return bytes(data)
